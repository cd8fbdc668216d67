"""One colour per ledger row, used by every chart on every page (and by the exports).

Okabe–Ito-derived, distinguishable with the common colour-vision deficiencies. Optimizer states
are purple and weights/gradients blue as in seed 2's cover figure; activations, the row that
moves with every training knob, get the warm accent.
"""
from __future__ import annotations

from memledger.ledger.items import ROW_LABELS, ROWS

ROW_COLORS: dict[str, str] = {
    "weights": "#0072B2",
    "gradients": "#56B4E9",
    "optimizer": "#7B4EA3",
    "activations": "#E69F00",
    "communication": "#009E73",
    "runtime": "#9A9A9A",
}
# Not a ledger row: the allocator's peak (the sum of the rows at the worst moment), drawn in near-
# black so it reads as the total next to the six row colours.
PEAK_COLOR = "#1B1B1B"
# The planner's recompute modes: blue, orange, green of the same Okabe–Ito set.
RECOMPUTE_COLORS = {"none": "#0072B2", "selective": "#E69F00", "full": "#009E73"}
# The step-time terms of the Planner's breakdown (memledger.planner.time.throughput.LABELS): one fixed
# colour each, so a term keeps its colour from row to row. Compute is the ledger's weights blue,
# recompute the activations orange it trades against; communication terms in greens and
# purples; idle time (bubble) grey.
TERM_COLORS = {"compute": "#0072B2", "recompute": "#E69F00", "tp": "#009E73", "cp": "#56B4E9",
               "ep": "#7B4EA3", "pp_p2p": "#CC79A7", "bubble": "#9A9A9A", "dp_sync": "#D55E00",
               "zero3": "#F0E442", "optimizer": "#262730", "grad_accum": "#8C564B"}
CAPACITY_COLOR = "#D62728"
OPTIMUM_COLOR = "#CC3311"
INK = "#262730"  # Streamlit's text colour, for annotations
GRID = "#E6E6E6"
FONT_FAMILY = "Inter, 'Source Sans Pro', Helvetica, Arial, sans-serif"

# Short row names for legends, so two fit side by side on a phone (hover text has the full names).
ROW_SHORT = {k: ROW_LABELS[k] for k in ROWS} | {
    "optimizer": "Optimizer", "communication": "Comm. buffers", "runtime": "Runtime"}
