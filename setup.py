"""Build hook for the optional C extension ``reveal.collect._procread``.

Everything else is declared in pyproject.toml. The extension is ``optional``: where it
cannot be compiled (no C compiler or Python headers) the install goes on and the collector
uses its pure-Python readers (``reveal probes`` says which path is in use).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "reveal.collect._procread",
            sources=["src/reveal/collect/_native/procread.c",
                     "src/reveal/collect/_native/localread.c",
                     "src/reveal/collect/_native/ticker.c"],
            depends=["src/reveal/collect/_native/procread.h"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-pthread"],
            extra_link_args=["-pthread"],
            optional=True,
        )
    ]
)
