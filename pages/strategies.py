"""Strategies: move a row, pay a currency (seed 1). Per-tensor storage policies and their price,
offload bandwidth verdicts, the levelled pipeline staircase and the advisor's four answers.

The configuration is the shared sidebar's; the page's own settings (policy preset, per-class
rules, target, MFU, all-to-all sizing) are page parameters (`strategies_state.SPECS`), so one
share link carries both. No arithmetic here: widgets → specs → core → chart builders.
"""
import streamlit as st

from memledger.advisor import advise
from memledger.costs.bandwidth import cpu_offload_verdicts, remote_offload_verdicts
from memledger.errors import SpecError
from memledger.presets.policies import POLICY_PRESETS
from memledger.specs.policy import CLASSES
from memledger.specs.runtime import A2A_SIZING
from memledger.views import guard, safe_text, sidebar, ui
from memledger.views.compute import policy_ledger
from memledger.views.frame import page_frame
from memledger.views.state import hardware
from memledger.views.strategies import charts
from memledger.views.strategies import state as pstate
from memledger.views.sync import resolve

page_frame("strategies")
SPECS = pstate.SPECS
POL = "pg_pol_"  # one selectbox per tensor class; the page prefix lets a new link reset them
A2A_HELP = ("MoE dispatch/combine buffers: *dynamic* = routed size (Megatron dropless), "
            "*capacity* = capacity factor, *worst-case* = every token to every local expert "
            "slot, *deepep-ll* = DeepEP low-latency's preallocated buffers.")


def _policy_changed(classes: tuple[str, ...]) -> None:
    """Callback of every class selectbox: the `policy` parameter is what differs from the
    preset (runs before the script, so `resolve` sees the new value)."""
    s = st.session_state
    s["pg_policy"] = pstate.policy_param(s["pg_preset"], {c: s[POL + c] for c in classes})


def _preset_changed() -> None:
    st.session_state["pg_policy"] = ""  # a new preset starts from its own rules


res = resolve("strategies", SPECS)
ui.issues(res)
guard.admit(res, "strategies", specs=SPECS, values=res.page)
page, hw = res.page, hardware(res.cfg)
stem = ui.stem(res, "strategies")
share = ui.header(f"Strategies: {safe_text.md(res.model.name)} on {res.cfg.world:,} × {hw.name}")
st.caption("Move a row, pay a currency: what each storage policy saves on the most loaded GPU "
           "and what it costs in FLOPs, precision or bandwidth.")
target = pstate.target_bytes(page["target"], hw)
target_label = "target" if page["target"] else hw.name

c = st.columns([3, 2, 2, 2])
c[0].selectbox("Policy preset", SPECS[0].choices, key="pg_preset", on_change=_preset_changed,
               format_func=lambda p: "none" if p == pstate.NO_PRESET else p,
               help="\n".join(f"- **{k}**: {p.source}" for k, p in POLICY_PRESETS.items()))
c[1].number_input("Target (GiB)", *SPECS[2].limits, key="pg_target",
                  help="Memory the most loaded GPU should fit in; the advisor aims for it. "
                       "0 = the GPU's capacity.")
c[2].number_input("MFU %", *SPECS[3].limits, key="pg_mfu",
                  help="Model FLOPs utilisation: prices recompute in seconds and sets how long "
                       "an offload has to hide behind compute.")
c[3].selectbox("MoE all-to-all sizing", A2A_SIZING, key="pg_a2a", help=A2A_HELP,
               disabled=res.model.moe is None)

before = policy_ledger(res.model, res.cfg, page["a2a"])
present = tuple(k for k in CLASSES if any(mv.cls == k for mv in before.peak.moves))
shown = pstate.shown_policies(page["preset"], page["policy"])
st.subheader("Storage policy per tensor class")
st.caption("Before = the sidebar's configuration; after = the preset (its recompute mode and "
           "rules), then these choices. Recompute pays FLOPs, fp8/int8/int4 pay precision, "
           "offload pays PCIe or NVLink bandwidth.")
for col, cls in ui.grid(present, 4):
    st.session_state[POL + cls] = shown.get(cls, "keep")
    col.selectbox(cls, pstate.POLICY_OPTIONS, key=POL + cls, help=CLASSES[cls],
                          on_change=_policy_changed, args=(present,))


def body() -> None:
    try:
        after = policy_ledger(res.model, res.cfg, page["a2a"], pstate.preset_name(page["preset"]),
                              tuple(sorted(pstate.decode_policy(page["policy"]).items())))
        advice = advise(after, target, page["mfu"])
    except SpecError as e:
        st.error(f"This policy is not valid here: {ui.md_escape(str(e))}",
                 icon=":material/error:")
        return
    st.dataframe(charts.policy_table(before, after, page["mfu"]), hide_index=True,
                 width="stretch", column_config={
                     "GiB per micro-batch": st.column_config.NumberColumn(format="%.3f"),
                     "GiB saved at peak": st.column_config.NumberColumn(format="%.3f")})
    ui.chart(charts.before_after(before, after, target, target_label), stem + "_policy",
             key="before_after", setting=ui.setting(res))

    st.subheader("Bandwidth: does the offload hide behind compute?")
    verdicts = (cpu_offload_verdicts(after, hw, page["mfu"])
                + remote_offload_verdicts(after, hw, page["mfu"]))
    if verdicts:
        st.dataframe(charts.bandwidth_table(verdicts), hide_index=True, width="stretch")
    else:
        st.info("No tensor class is offloaded: nothing moves over PCIe or between ranks.")

    st.subheader("The staircase, levelled")
    ui.chart(charts.levelled_staircase(advice.staircase, target, target_label),
             stem + "_levelled", key="levelled", setting=ui.setting(res))

    st.subheader("The advisor's questions")
    if advice.fits:
        st.success("This configuration already fits the target.", icon=":material/check_circle:")
    for title, lines in charts.advice_sections(advice).items():
        st.markdown(f"**{title}**\n" + "\n".join(f"- {ui.md_escape(x)}" for x in lines))


body()
sidebar.draw(res)
ui.finish(res, SPECS, share=share)
