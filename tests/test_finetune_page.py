"""The sidebar's Fine-tuning section under AppTest: choosing LoRA changes the chart and the URL,
a fine-tuning link opens that configuration, and a setting the core refuses shows st.error
naming the field and its valid values while the page keeps working."""
from urllib.parse import urlencode

from conftest import chart_numbers, figures

LEDGER = "pages/ledger.py"


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_choosing_lora_shrinks_the_chart_and_reaches_the_url(app_test):
    at = ok(app_test(LEDGER).run())
    before = chart_numbers(figures(at)[0])
    at.selectbox(key="sb_ft").set_value("lora").run()
    ok(at)
    assert at.query_params == {"ft": "lora"}
    assert chart_numbers(figures(at)[0]) != before
    assert at.number_input(key="sb_lora_r").value == 8  # peft's default rank
    assert "?ft=lora" in at.code[0].value


def test_a_fine_tuning_link_opens_that_configuration(app_test):
    at = app_test(LEDGER)
    for k, v in {"ft": "qlora", "lora_r": "64", "lora_targets": "all-linear"}.items():
        at.query_params[k] = v
    ok(at.run())
    assert at.error == []
    assert at.selectbox(key="sb_ft").value == "qlora"
    assert at.text_input(key="sb_lora_targets").value == "all-linear"
    assert at.number_input(key="sb_lora_r").value == 64


def test_a_target_the_model_lacks_is_an_error_naming_the_field_and_the_page_still_works(app_test):
    at = app_test(LEDGER)
    at.query_params["ft"] = "lora"
    ok(at.run())
    at.text_input(key="sb_lora_targets").set_value("q_a_proj").run()  # MLA's, not Llama's
    ok(at)
    errors = [e.value.replace("\\", "") for e in at.error]  # markdown-escaped
    assert any("lora_targets" in e and "q_a_proj" in e and "valid" in e and "q_proj" in e
               for e in errors), errors
    assert at.selectbox(key="sb_ft").value == "lora"  # the targets moved back, LoRA stays
    assert figures(at)  # the chart is still drawn, for the repaired configuration


def test_a_bad_fine_tuning_link_names_the_parameter(app_test):
    at = app_test(LEDGER)
    at.query_params["lora_targets"] = "bogus"
    ok(at.run())
    text = " ".join(e.value for e in at.error) + " ".join(w.value for w in at.warning)
    assert "lora_targets" in text and "bogus" in text, text
    assert figures(at)
