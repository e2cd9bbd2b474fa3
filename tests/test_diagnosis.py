"""Error kinds of a scored document: each predicted and expected value sorted once."""

from __future__ import annotations

from extractor.jobs.diagnosis import diagnose, diagnose_all, report_text

TEXT = "招商银行总经理王立新在深圳说，王立新很忙。"


def kinds(expected: object, predicted: object) -> dict[str, int]:
    return {k: v for k, v in diagnose(TEXT, expected, predicted).counts.items() if v}


def test_exact_values_are_correct_and_the_rest_missed() -> None:
    assert kinds({"name": ["王立新", "王立新"], "address": ["深圳"]}, {"name": ["王立新"]}) == {
        "correct": 1,
        "missed": 2,
    }


def test_a_value_under_another_field_is_a_type_error() -> None:
    assert kinds({"company": ["招商银行"]}, {"organization": ["招商银行"]}) == {"wrong_field": 1}


def test_overlapping_values_are_boundary_errors_by_field() -> None:
    assert kinds({"company": ["招商银行"]}, {"company": ["招商"]}) == {"boundary": 1}
    assert kinds({"company": ["招商银行"]}, {"organization": ["招商银行总经理"]}) == {"boundary_and_field": 1}


def test_values_the_gold_lacks_are_invented_and_surplus_copies_duplicates() -> None:
    assert kinds({"name": ["王立新"]}, {"name": ["王立新", "王立新"], "address": ["很忙", "很忙"]}) == {
        "correct": 1,
        "duplicate": 2,
        "invented": 1,
    }


def test_nothing_predicted_misses_everything_and_empty_lists_are_counted() -> None:
    assert kinds({"name": ["王立新"]}, None) == {"missed": 1}
    assert diagnose(TEXT, {"name": ["王立新"]}, {"name": ["王立新"], "book": [], "game": None}).empty == 2


def test_summed_over_records_with_a_readable_table() -> None:
    total = diagnose_all(
        [
            {"text": TEXT, "expected": {"name": ["王立新"]}, "predicted": {"name": ["王立"]}},
            {"text": TEXT, "expected": {"address": ["深圳"]}, "predicted": {"address": ["深圳"]}},
        ]
    )
    summary = total.as_dict()
    assert (summary["docs"], summary["correct"], summary["boundary"]) == (2, 1, 1)
    assert summary["error_shares"]["boundary"] == 1.0
    assert summary["examples"]["boundary"][0]["gold"] == ("/name", "王立新")
    assert "boundary" in report_text(total)
