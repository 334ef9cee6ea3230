"""The page around the HTML report: style, Bokeh's script inlined once, the plots' data.

The page needs no network: Bokeh's core bundle (``bokeh.min.js``, about 1.3 MB; the widget,
table, GL and MathJax bundles are not needed and not included) is inlined once, at the end of
the body (the text paints before the script is parsed), and
each plot's document is JSON in one ``<script type="application/json">`` element that a
few lines of script hand to ``Bokeh.embed.embed_item``. That JSON holds tenant text (claims
and channel names shown in tooltips): :func:`script_json` escapes ``<``, ``>``, ``&`` and
U+2028/U+2029 so nothing in it can close the element or start markup.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from bokeh.embed import json_item
from bokeh.resources import Resources

_SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026",
                   0x2028: "\\u2028", 0x2029: "\\u2029"}

STYLE = """
:root { --ink:#1b1f23; --muted:#5b6670; --rule:#d9dee3; --bad:#b3261e; --good:#1e7b34; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: var(--ink); margin: 0 auto; max-width: 1200px; padding: 16px 24px 48px; }
h1 { font-size: 26px; margin: 4px 0; } h2 { font-size: 19px; margin: 28px 0 8px;
  border-bottom: 1px solid var(--rule); padding-bottom: 4px; }
h3 { font-size: 16px; margin: 0 0 6px; } h4 { font-size: 13px; margin: 14px 0 4px;
  text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.verdict { border-left: 6px solid var(--bad); padding: 8px 16px; background: #fdf3f2; }
.verdict.clean { border-left-color: var(--good); background: #f1f8f3; }
.verdict h1 { color: var(--bad); } .verdict.clean h1 { color: var(--good); }
.muted { color: var(--muted); } .small { font-size: 12px; }
.warnings li { color: #7a4f00; }
.episode { border: 1px solid var(--rule); border-left: 6px solid #7f7f7f; border-radius: 4px;
  padding: 12px 16px; margin: 14px 0; }
.claim { font-size: 15px; font-weight: 600; margin: 4px 0; }
.evidence { max-width: 520px; }
.bar { display: flex; align-items: center; gap: 8px; margin: 2px 0; font-size: 12px; }
.bar .name { width: 80px; } .bar .pct { width: 40px; text-align: right; }
.bar .track { flex: 1; height: 10px; background: #eef1f4; border-radius: 2px; }
.bar .fill { display: block; height: 100%; border-radius: 2px; }
table { border-collapse: collapse; font-size: 12px; width: 100%; }
th, td { border-bottom: 1px solid var(--rule); padding: 3px 6px; text-align: left;
  vertical-align: top; }
th { background: #f5f7f9; } td.num { text-align: right; white-space: nowrap; }
td.channel, p.channel { font-family: ui-monospace, Menlo, Consolas, monospace;
  word-break: break-all; }
p.channel { font-size: 12px; margin: 10px 0 0; }
.plot { width: 100%; }
.facts { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.facts table th { width: 40%; background: none; font-weight: 500; color: var(--muted); }
"""

#: Hands each plot's document (JSON by div id) to Bokeh, one at a time in page order: the
#: timeline first, and the browser paints and answers input between plots.
_EMBED = """(function () {
  var items = JSON.parse(document.getElementById("reveal-plots").textContent);
  var ids = Object.keys(items);
  function next() {
    var id = ids.shift();
    if (id === undefined) return;
    var item = items[id];
    delete items[id];
    Promise.resolve().then(function () { return Bokeh.embed.embed_item(item, id); })
      .catch(function (e) { console.error("plot " + id + ": " + e); })
      .then(function () { setTimeout(next, 0); });
  }
  next();
})();"""


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element: ``<``, ``>``, ``&``
    and the JavaScript line separators U+2028/U+2029 written as ``\\u`` escapes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).translate(_SCRIPT_ESCAPES)


@lru_cache(maxsize=1)
def bokeh_script() -> str:
    """Bokeh's core bundle as inline ``<script>`` elements (the same for every page)."""
    return Resources(mode="inline", components=["bokeh"]).render_js()


def plots_script(plots: dict[str, Any]) -> str:
    """The script elements that draw ``plots`` (Bokeh models by the id of their div)."""
    items = {div_id: json_item(model) for div_id, model in plots.items()}
    return (f'<script type="application/json" id="reveal-plots">{script_json(items)}'
            f"</script>\n<script>{_EMBED}</script>")


def page(title: str, body: str, plots: dict[str, Any]) -> str:
    """The whole document. ``title`` and ``body`` are HTML already escaped."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n"
            f"<body>\n{body}\n{bokeh_script()}\n{plots_script(plots)}\n</body>\n</html>\n")
