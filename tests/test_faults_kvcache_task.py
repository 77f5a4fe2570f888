"""Silent failures of the paged cache's host helpers, the task's scoring and the case study's runs, each found by an
audit with a reproducer: a request continued on pages it does not hold, slots outside the pool, a negative slot
read as a page id, an empty context, answers that can never match, and a question count that silently wraps."""

from __future__ import annotations

import pytest
import torch

from mla_edu.case_study import diagnose as dg
from mla_edu.kvcache import LatentKVCache, PagedAllocator, ReqToTokenPool, fill_page_table
from mla_edu.model import task

from markers import CPU_TRITON

P = 4


def pool_and_allocator():
    return ReqToTokenPool(size=2, max_context_len=16), PagedAllocator(num_pages=8, page_size=P)


@pytest.mark.parametrize("old_len", [1, 3, 4, 5, 8])  # inside a page and at a page boundary
def test_a_row_never_filled_is_not_continued_at_any_length(old_len):
    pool, alloc = pool_and_allocator()
    row = pool.req_to_token[pool.alloc(1)[0]]
    free = alloc.available_pages()
    with pytest.raises(ValueError, match=r"req_to_token_row\[0:\d\]: .* got page 0, the reserved padding page"):
        alloc.slots_for(row, old_len, old_len + 1)
    assert alloc.available_pages() == free and int(row[old_len]) == 0  # nothing taken, nothing written


@pytest.mark.parametrize("old_len", [4, 5, 8])
def test_a_request_whose_pages_were_freed_is_not_continued(old_len):
    pool, alloc = pool_and_allocator()
    row = pool.req_to_token[pool.alloc(1)[0]]
    alloc.slots_for(row, 0, old_len)
    pages = alloc.pages_of(row, old_len)
    alloc.free_pages(pages)
    with pytest.raises(ValueError, match=rf"got page {int(pages[0])}, which is not allocated \(freed\?\)"):
        alloc.slots_for(row, old_len, old_len + 1)
    row2 = pool.req_to_token[pool.alloc(1)[0]]  # the pages are free again: a new request gets them
    assert alloc.slots_for(row2, 0, old_len).numel() == old_len


def test_a_request_holding_its_pages_is_continued_on_its_last_page():
    pool, alloc = pool_and_allocator()
    row = pool.req_to_token[pool.alloc(1)[0]]
    alloc.slots_for(row, 0, 5)
    slot = alloc.slots_for(row, 5, 6)
    assert int(slot[0]) // P == int(row[4]) // P  # the partly filled page goes on


@pytest.mark.parametrize("loc", [[3, 16], [3, -1], [99]])
def test_set_kv_refuses_slots_outside_the_pool_before_writing(loc):
    cache = LatentKVCache(num_layers=1, num_pages=4, page_size=P, kv_lora_rank=8, qk_rope_head_dim=4)
    before = cache.get_kv_buffer(0).clone()
    n = len(loc)
    with pytest.raises(ValueError, match=r"loc: expected slots in \[0, 16\) \(num_slots\), got"):
        cache.set_kv(0, torch.tensor(loc), torch.randn(n, 8), torch.randn(n, 4))
    assert torch.equal(cache.get_kv_buffer(0), before)


def test_set_kv_lets_padded_rows_share_the_padding_slot():
    cache = LatentKVCache(num_layers=1, num_pages=4, page_size=P, kv_lora_rank=8, qk_rope_head_dim=4)
    cache.set_kv(0, torch.tensor([5, 0, 0]), torch.randn(3, 8), torch.randn(3, 4))


@pytest.mark.parametrize("impl", ["torch", pytest.param("triton", marks=CPU_TRITON)])
def test_fill_page_table_refuses_a_negative_slot_where_a_page_id_is_read(impl):
    # host values (on a GPU, NO_PAGE is written: test_faults_round3's unreadable values)
    r2t = torch.tensor([[8, 9, 10, 11, -200, 13, 14, 15]], dtype=torch.int32)
    table = torch.full((1, 2), 7, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"req_to_token\[0\] \(request 0\): expected slots >= 0 .* got -200"):
        fill_page_table(r2t, torch.tensor([0]), torch.tensor([8]), table, P, impl=impl)
    assert table.tolist() == [[7, 7]]
    fill_page_table(r2t, torch.tensor([0]), torch.tensor([4]), table, P, impl=impl)  # the bad slot is not read
    assert table.tolist()[0][0] == 2


def test_fill_page_table_refuses_an_empty_context():
    with pytest.raises(ValueError, match=r"both at least 1, got shape \(2, 0\)"):
        fill_page_table(torch.zeros(2, 0, dtype=torch.int32), torch.tensor([0]), torch.tensor([0]),
                        torch.zeros(1, 2, dtype=torch.int32), P)


@pytest.mark.parametrize("answers, match", [([True], "got bool True"), ([42.0], "got float 42.0"),
                                            ([-42], "got int -42")])
def test_score_refuses_answers_that_can_never_match(answers, match):
    with pytest.raises(TypeError, match=rf"answers\[0\]: expected an int >= 0 or a str holding one, {match}"):
        task.score(["42"], answers)


def test_score_names_the_generated_text_that_is_not_text():
    with pytest.raises(TypeError, match=r"generated\[1\]: expected the generated text as str, got NoneType"):
        task.score(["42", None], [42, 7])
    assert task.score(["the answer is 42", "7"], [42, "7"]) == (1.0, 0.0)


@pytest.mark.parametrize("n, match", [(-5, "expected an int >= 1"), (0, "expected an int >= 1"),
                                      (True, "expected an int >= 1"), (10**6, "expected at most the 3 questions")])
def test_accuracy_runs_refuses_a_question_count_it_cannot_run(n, match):
    with pytest.raises(ValueError, match=rf"n: {match}"):
        dg.accuracy_runs(None, task.default_eval_set()[:3], n)
