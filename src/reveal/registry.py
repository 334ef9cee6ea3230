"""One way for every kind of plugin to join: a registry keyed by name, a class decorator.

Detectors (:mod:`reveal.analysis.detectors`), probes (:mod:`reveal.collect.probe`), faults
(:mod:`reveal.inject.faults`) and alert sinks (:mod:`reveal.live.sinks`) each keep one
:class:`Registry`; a new one is one module whose class carries the registry's decorator::

    from reveal.analysis.detectors import register, Detector

    @register
    class Farthest(Detector):
        name = "farthest"
        ...

A registry is a ``dict`` from name to class, in registration order (the built-ins
first), so it reads as one.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from reveal.errors import InputError

T = TypeVar("T", bound=type)


class Registry(dict[str, T], Generic[T]):
    """Classes of one kind by name.

    Parameters
    ----------
    kind : str
        What the classes are, for messages ("detector", "probe", ...).
    base : type
        The class every registered one derives from.
    key : str
        The class attribute holding its name (``name``; faults: ``kind``).
    identifier : bool
        The name must be a Python identifier (it is written in settings and options).
    """

    def __init__(self, kind: str, base: type, key: str = "name",
                 identifier: bool = False) -> None:
        super().__init__()
        self.kind = kind
        self.base = base
        self.key = key
        self.identifier = identifier

    def register(self, cls: T) -> T:
        """Class decorator: make ``cls`` available under its name.

        Raises ``ValueError`` for a class not derived from the base, one without a name of
        its own, or a name another class already holds (the same class again, or its
        module run once more as ``__main__``: no change).
        """
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise ValueError(f"{cls!r} is not a {self.base.__name__} subclass")
        name = getattr(cls, self.key, None)
        inherited = getattr(self.base, self.key, None)
        if (not isinstance(name, str) or not name or name == inherited
                or (self.identifier and not name.isidentifier())):
            what = "a name (an identifier)" if self.identifier else "a name"
            raise ValueError(f"{cls.__name__} needs {what}, got {name!r}")
        held = self.get(name)
        if held is not None and held is not cls:
            if _same_module_run_as_script(held, cls):
                return cls  # the module again as ``python -m``: the registered class stays
            raise ValueError(f"{self.kind} name {name!r} is taken by {held.__qualname__}")
        self[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove the class registered as ``name`` (a no-op when there is none)."""
        self.pop(name, None)

    def lookup(self, name: str) -> T:
        """The class registered as ``name``; ``InputError`` naming the known ones."""
        try:
            return self[name]
        except KeyError:
            raise InputError(f"unknown {self.kind} {name!r}; known: {', '.join(self)}") \
                from None

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self)


def _same_module_run_as_script(held: type, cls: type) -> bool:
    """Whether ``cls`` is ``held`` defined a second time because its module also runs as
    ``__main__`` (a plugin module that is a child process's entry point)."""
    return (held.__qualname__ == cls.__qualname__
            and "__main__" in (held.__module__, cls.__module__))
