"""Option dataclasses: a field's help text is the string literal under it (its attribute docstring)."""

from __future__ import annotations

import dataclasses

from semiret.options import field_docs


@dataclasses.dataclass
class Outer:
    size: int = 3
    """How many.

    Only the first paragraph is help text."""
    plain: int = 0

    @dataclasses.dataclass
    class Inner:
        depth: int = 1
        """How deep,
        on two lines."""


def test_attribute_docstrings_of_module_nested_and_local_classes_and_their_bases():
    assert field_docs(Outer) == {"size": "How many."}
    assert field_docs(Outer.Inner) == {"depth": "How deep, on two lines."}

    @dataclasses.dataclass
    class Local(Outer):
        extra: str = ""
        """A field of a class made in a function."""

    @dataclasses.dataclass
    class Other:  # the same name elsewhere must not be taken for it
        size: int = 0
        """Not Outer's."""

    assert field_docs(Local) == {"size": "How many.", "extra": "A field of a class made in a function."}
    assert field_docs(Other) == {"size": "Not Outer's."}
    assert field_docs(dataclasses.make_dataclass("Made", [("x", int)])) == {}  # no source: no help, no error
