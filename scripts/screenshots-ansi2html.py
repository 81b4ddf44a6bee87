#!/usr/bin/env python3
"""Turns a `tmux capture-pane -e -p` capture into a self-contained HTML page that looks like the terminal.

Usage: screenshots-ansi2html.py --cols 160 --rows 48 [--title T] < capture.ansi > page.html

Part of scripts/screenshots. Python standard library only. Handles SGR: reset, bold, dim, italic, underline,
reverse, hidden, strike-through and their resets; 16 colours (30-37, 90-97, 40-47, 100-107), 256 colours
(38;5;n / 48;5;n) and truecolor (38;2;r;g;b / 48;2;r;g;b, also with colons). Other escape sequences are dropped.

The page is a grid of exactly --cols x --rows cells. Every character sits in an inline block of a whole
number of pixels (twice that for East Asian wide characters), so cells start on pixel boundaries, a glyph from
a fallback font cannot shift the columns after it, and runs of box-drawing and block characters show no seams.
The line height is a little under the font's own height so that those characters also touch across rows.
"""

import argparse
import html
import re
import sys
import unicodedata

# Dark theme: VS Code's terminal palette with a lighter "bright black" (ratatui's DarkGray), which the
# dashboard uses for labels and must stay legible on the dark background.
BACKGROUND = (0x1C, 0x1C, 0x1C)
FOREGROUND = (0xD4, 0xD4, 0xD4)
PALETTE16 = [
    (0x00, 0x00, 0x00), (0xCD, 0x31, 0x31), (0x0D, 0xBC, 0x79), (0xE5, 0xE5, 0x10),
    (0x24, 0x72, 0xC8), (0xBC, 0x3F, 0xBC), (0x11, 0xA8, 0xCD), (0xE5, 0xE5, 0xE5),
    (0x80, 0x80, 0x80), (0xF1, 0x4C, 0x4C), (0x23, 0xD1, 0x8B), (0xF5, 0xF5, 0x43),
    (0x3B, 0x8E, 0xEA), (0xD6, 0x70, 0xD6), (0x29, 0xB8, 0xDB), (0xFF, 0xFF, 0xFF),
]
DIM_WEIGHT = 0.6  # dim text: this much of the foreground, the rest of the background

# DejaVu Sans Mono advances 1233/2048 em per character: 9.03 px at 15 px. Cells are a whole 9 px, a hair
# narrower than the glyphs, so full blocks and horizontal rules of neighbouring cells overlap instead of
# leaving a seam (cells as wide as the glyph drift off the pixel grid and show faint seams).
FONT_SIZE_PX = 15
CELL_WIDTH_PX = 9
# Its ascent + descent is 2384/2048 em = 17.5 px; a 17 px line lets vertical strokes of neighbouring rows
# overlap by a fraction of a pixel instead of leaving a gap.
LINE_HEIGHT_PX = 17
PADDING_PX = 10


def colour256(n):
    """The xterm 256-colour palette."""
    if n < 16:
        return PALETTE16[n]
    if n < 232:
        n -= 16
        levels = (0, 95, 135, 175, 215, 255)
        return (levels[n // 36], levels[(n // 6) % 6], levels[n % 6])
    grey = 8 + 10 * (n - 232)
    return (grey, grey, grey)


class Style:
    __slots__ = ("fg", "bg", "bold", "dim", "italic", "underline", "reverse", "hidden", "strike")

    def __init__(self):
        self.reset()

    def reset(self):
        self.fg = None  # None: the default colour; else an (r, g, b) tuple
        self.bg = None
        self.bold = self.dim = self.italic = self.underline = False
        self.reverse = self.hidden = self.strike = False

    def key(self):
        return tuple(getattr(self, name) for name in self.__slots__)


def parse_extended_colour(params, i):
    """Reads the colour after a 38/48 at params[i]; returns (colour or None, next index)."""
    if i + 1 < len(params) and params[i + 1] == 5 and i + 2 < len(params):
        return colour256(params[i + 2] % 256), i + 3
    if i + 1 < len(params) and params[i + 1] == 2 and i + 4 < len(params):
        r, g, b = (min(255, value) for value in params[i + 2:i + 5])
        return (r, g, b), i + 5
    return None, len(params)  # malformed: ignore the rest of the sequence


def apply_sgr(style, text):
    if ":" in text:
        # ITU form 38:2:<colourspace>:r:g:b or 38:5:n; one sub-parameter group per ';'.
        params = []
        for group in text.split(";"):
            parts = [int(p) if p else 0 for p in group.split(":")]
            if len(parts) >= 6 and parts[:2] in ([38, 2], [48, 2]):
                parts = parts[:2] + parts[3:6]
            params.extend(parts)
    else:
        params = [int(p) if p else 0 for p in text.split(";")] if text else [0]
    i = 0
    while i < len(params):
        p = params[i]
        i += 1
        if p == 0:
            style.reset()
        elif p == 1:
            style.bold = True
        elif p == 2:
            style.dim = True
        elif p == 3:
            style.italic = True
        elif p in (4, 21):
            style.underline = True
        elif p == 7:
            style.reverse = True
        elif p == 8:
            style.hidden = True
        elif p == 9:
            style.strike = True
        elif p == 22:
            style.bold = style.dim = False
        elif p == 23:
            style.italic = False
        elif p == 24:
            style.underline = False
        elif p == 27:
            style.reverse = False
        elif p == 28:
            style.hidden = False
        elif p == 29:
            style.strike = False
        elif 30 <= p <= 37:
            style.fg = PALETTE16[p - 30]
        elif p == 39:
            style.fg = None
        elif 40 <= p <= 47:
            style.bg = PALETTE16[p - 40]
        elif p == 49:
            style.bg = None
        elif 90 <= p <= 97:
            style.fg = PALETTE16[p - 90 + 8]
        elif 100 <= p <= 107:
            style.bg = PALETTE16[p - 100 + 8]
        elif p in (38, 48, 58):
            colour, i = parse_extended_colour(params, i - 1)
            if p == 38:
                style.fg = colour
            elif p == 48:
                style.bg = colour
        # anything else (blink, fonts, overline, ...) is ignored


ESCAPE = re.compile(
    r"\x1b\[([0-9;:?<=>]*)([ -/]*)([@-~])"  # CSI
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC
    r"|\x1b[()][0-9A-Za-z]"  # charset designation
    r"|\x1b[@-_]"  # other two-byte escapes
)


def cell_width(char):
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def parse(text, cols, rows):
    """Returns rows x cols cells, each (char, style key) or None for the right half of a wide character."""
    blank = Style().key()
    grid = [[(" ", blank) for _ in range(cols)] for _ in range(rows)]
    style = Style()
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for y, line in enumerate(lines[:rows]):
        x = 0
        pos = 0
        for match in ESCAPE.finditer(line + "\x1b[@"):  # a sentinel match flushes the tail
            for char in line[pos:match.start()]:
                width = cell_width(char)
                if char == "\t":
                    x = min(cols, (x // 8 + 1) * 8)
                    continue
                if width == 0 or ord(char) < 0x20:
                    continue
                if x + width > cols:
                    break
                grid[y][x] = (char, style.key())
                if width == 2:
                    grid[y][x + 1] = None
                x += width
            pos = match.end()
            if match.group(3) == "m" and not match.group(2):
                apply_sgr(style, match.group(1))
    return grid


def hex_colour(rgb):
    return "#%02x%02x%02x" % rgb


def css(key):
    fg, bg, bold, dim, italic, underline, reverse, hidden, strike = key
    fg = fg or FOREGROUND
    bg = bg or BACKGROUND
    default_bg = key[1] is None
    if reverse:
        fg, bg = bg, fg
        default_bg = False
    if dim:
        fg = tuple(round(DIM_WEIGHT * f + (1 - DIM_WEIGHT) * b) for f, b in zip(fg, bg))
    if hidden:
        fg = bg
    rules = []
    if fg != FOREGROUND:
        rules.append("color:" + hex_colour(fg))
    if not default_bg:
        rules.append("background:" + hex_colour(bg))
    if bold:
        rules.append("font-weight:bold")
    if italic:
        rules.append("font-style:italic")
    decorations = [name for flag, name in ((underline, "underline"), (strike, "line-through")) if flag]
    if decorations:
        rules.append("text-decoration:" + " ".join(decorations))
    return ";".join(rules)


def render_row(row):
    out = []
    run_key = None
    run = []

    def flush():
        if not run:
            return
        body = "".join(run)
        style = css(run_key)
        out.append('<span style="%s">%s</span>' % (style, body) if style else body)
        run.clear()

    for cell in row:
        if cell is None:
            continue
        char, key = cell
        if key != run_key:
            flush()
            run_key = key
        run.append(("<i>%s</i>" if cell_width(char) == 1 else '<i class="w">%s</i>') % html.escape(char))
    flush()
    return "".join(out)


PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
html, body {{ margin: 0; background: {bg}; }}
#term {{
  display: inline-block; margin: 0; padding: {pad}px; background: {bg}; color: {fg};
  font-family: "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: {size}px;
  line-height: {line}px; font-variant-ligatures: none; font-kerning: none;
}}
#term > div {{ height: {line}px; width: {row_width}px; white-space: pre; }}
/* one <i> per cell */
i {{ display: inline-block; width: {cell}px; font-style: inherit; text-decoration: inherit; }}
i.w {{ width: {wide}px; }}
</style></head>
<body><div id="term">
{rows}
</div>
<script>
// scripts/screenshots reads this (chromium --dump-dom) to size the screenshot window to the content.
const box = document.getElementById("term").getBoundingClientRect();
const size = document.createElement("div");
size.id = "size";
size.style.display = "none";
size.textContent = Math.ceil(box.width) + "x" + Math.ceil(box.height);
document.body.appendChild(size);
</script>
</body></html>
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cols", type=int, required=True)
    parser.add_argument("--rows", type=int, required=True)
    parser.add_argument("--title", default="efatop")
    args = parser.parse_args()
    text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    grid = parse(text, args.cols, args.rows)
    rows = "".join("<div>%s</div>\n" % render_row(row) for row in grid)
    sys.stdout.write(PAGE.format(
        title=html.escape(args.title), bg=hex_colour(BACKGROUND), fg=hex_colour(FOREGROUND),
        pad=PADDING_PX, size=FONT_SIZE_PX, line=LINE_HEIGHT_PX, cell=CELL_WIDTH_PX, wide=2 * CELL_WIDTH_PX,
        row_width=args.cols * CELL_WIDTH_PX, rows=rows,
    ))


if __name__ == "__main__":
    main()
