"""Plain SVG written element by element: what the docs' figure scripts draw with (no plotting
library; each figure is a few dozen elements). Each script puts this folder on ``sys.path``."""

from __future__ import annotations

from xml.sax.saxutils import escape

#: The grey of explanatory text.
NOTE = "#555"


class Svg:
    """An SVG document built element by element."""

    def __init__(self, width: int, height: int, title: str) -> None:
        self.width, self.height = width, height
        self.parts = [f"  <title>{escape(title)}</title>"]

    def add(self, element: str) -> None:
        self.parts.append("  " + element)

    def rect(self, x: float, y: float, w: float, h: float, **style: object) -> None:
        self.add(f'<rect x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}"{_attrs(style)}/>')

    def line(self, x1: float, y1: float, x2: float, y2: float, **style: object) -> None:
        self.add(f'<line x1="{x1:g}" y1="{y1:g}" x2="{x2:g}" y2="{y2:g}"{_attrs(style)}/>')

    def circle(self, x: float, y: float, r: float, **style: object) -> None:
        self.add(f'<circle cx="{x:g}" cy="{y:g}" r="{r:g}"{_attrs(style)}/>')

    def text(self, x: float, y: float, words: str, **style: object) -> None:
        self.add(f'<text x="{x:g}" y="{y:g}"{_attrs(style)}>{escape(words)}</text>')

    def notes(self, x: float, y: float, lines: list[str], step: float = 20, colour: str = NOTE) -> None:
        """Grey lines of text; a line's leading spaces indent it (SVG collapses them)."""
        for i, line in enumerate(lines):
            indent = len(line) - len(line.lstrip(" "))
            if line.strip():
                self.text(x + 6 * indent, y + step * i, line.strip(), fill=colour, font_size=12)

    def hatch(self, name: str, colour: str) -> None:
        """A diagonal hatch pattern, used as ``fill="url(#name)"``."""
        self.add(
            f'<defs><pattern id="{name}" width="6" height="6" patternUnits="userSpaceOnUse" '
            f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#fff"/>'
            f'<line x1="0" y1="0" x2="0" y2="6" stroke="{colour}" stroke-width="2.5"/></pattern></defs>'
        )

    def render(self) -> str:
        head = (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
            'font-family="sans-serif" font-size="13">'
        )
        return "\n".join([head, *self.parts, "</svg>", ""])


def _attrs(style: dict[str, object]) -> str:
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{v}"' for k, v in style.items())
