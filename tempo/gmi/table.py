"""Plain-text tables for the CLI and the benchmark."""
from __future__ import annotations


def format_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """Rows as an aligned table; ``columns`` are (key, header, format spec)."""
    cells = [[header for _, header, _ in columns]]
    for row in rows:
        cells.append([format(row[key], spec) if row.get(key) is not None else "-"
                      for key, _, spec in columns])
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(line, widths)) for line in cells]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
