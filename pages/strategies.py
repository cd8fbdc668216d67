"""Strategies: move a row, pay a currency (seed 1). Per-tensor storage policies, their price,
offload bandwidth verdicts, the levelled pipeline staircase and the advisor's four answers.

Runs standalone (`streamlit run pages/strategies.py`) with its own minimal widgets; every
setting round-trips through the URL query parameters. No arithmetic here: widgets → specs →
core → chart builders.
"""
import streamlit as st

from memledger.advisor import advise
from memledger.bandwidth import cpu_offload_verdicts, remote_offload_verdicts
from memledger.errors import SpecError
from memledger.ledger import build_ledger
from memledger.specs.policy import CLASSES
from memledger.views import strategies_charts as charts
from memledger.views import strategies_state as state

POLICY_OPTIONS = ("keep", "recompute", "fp8", "int8", "int4", "offload-cpu", "offload-pp",
                  "fp8+offload-cpu", "fp8+offload-pp")

st.title("Strategies: move a row, pay a currency")
values, problems = state.parse(st.query_params.to_dict())
for msg in problems:
    st.error(msg)


def pick(label, key, options, col):
    options = list(options)
    return col.selectbox(label, options, index=options.index(values[key]), key=f"w_{key}")


with st.expander("Configuration", expanded=True):
    c = st.columns(4)
    values["model"] = pick("model", "model", state.CHOICES["model"], c[0])
    values["gpu"] = pick("GPU", "gpu", state.CHOICES["gpu"], c[1])
    values["preset"] = pick("policy preset", "preset", state.CHOICES["preset"], c[2])
    values["recompute"] = pick("recompute", "recompute", state.CHOICES["recompute"], c[3])
    c = st.columns(8)
    for i, (key, label) in enumerate((("world", "world"), ("tp", "tp"), ("pp", "pp"), ("ep", "ep"),
                                      ("zero", "ZeRO"), ("mb", "micro-batch"), ("seq", "seq"),
                                      ("m", "micro-batches"))):
        values[key] = int(c[i].number_input(label, min_value=0 if key == "zero" else 1,
                                            value=int(values[key]), step=1, key=f"w_{key}"))
    c = st.columns(2)
    values["a2a"] = pick("MoE all-to-all sizing", "a2a", state.CHOICES["a2a"], c[0])
    values["target"] = float(c[1].number_input("target GiB (0 = GPU capacity)", min_value=0.0,
                                               value=float(values["target"]), key="w_target"))

try:
    m, p, t_base, t, rt, hw, target = state.to_specs(values)
    before = build_ledger(m, p, t_base, rt, hw)
except SpecError as e:
    st.error(str(e))
    st.stop()

st.subheader("Storage policy per tensor class")
shown = state.shown_policies(values)
present = [c for c in CLASSES if any(mv.cls == c for mv in before.peak.moves)]
cols = st.columns(4)
chosen = {}
for i, cls in enumerate(present):
    current = shown.get(cls, "keep")
    options = POLICY_OPTIONS if current in POLICY_OPTIONS else POLICY_OPTIONS + (current,)
    chosen[cls] = cols[i % 4].selectbox(cls, options, index=options.index(current), key=f"pol_{cls}",
                                        help=CLASSES[cls])
values["policy"] = state.policy_param(values, chosen)
st.query_params.from_dict(state.to_params(values))

try:
    m, p, t_base, t, rt, hw, target = state.to_specs(values)
    after = build_ledger(m, p, t, rt, hw)
    advice = advise(after, target)
except SpecError as e:
    st.error(str(e))
    st.stop()

st.dataframe(charts.policy_table(before, after), hide_index=True, width="stretch")
st.plotly_chart(charts.before_after(before, after, target), key="before_after")

st.subheader("Bandwidth: does the offload hide behind compute?")
verdicts = cpu_offload_verdicts(after, hw) + remote_offload_verdicts(after, hw)
if verdicts:
    st.dataframe(charts.bandwidth_table(verdicts), hide_index=True, width="stretch")
else:
    st.info("No tensor class is offloaded: nothing moves over PCIe or between ranks.")

st.subheader("The staircase, levelled")
st.plotly_chart(charts.levelled_staircase(advice.staircase, target), key="levelled")

st.subheader("The advisor's four questions")
if advice.fits:
    st.success("This configuration already fits the target.")
for title, lines in charts.advice_sections(advice).items():
    st.markdown(f"**{title}**\n" + "\n".join(f"- {line}" for line in lines))
