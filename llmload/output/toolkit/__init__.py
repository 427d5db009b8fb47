"""The output toolkit every report draws with: one table layout (`grid`), one family of cell
formatters (`cells`) and one figure helper (`figure`, the only module that imports matplotlib, and
only when a plot is drawn). Contracts in pyproject.toml keep tabulate and matplotlib here."""
