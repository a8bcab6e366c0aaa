"""Host buffers on huge pages (gpse_dgl.utils.memory): the advice covers whole 2 MiB pages inside the buffer,
is given before anything is written, and never changes what the buffer holds."""
from __future__ import annotations

import os
import sys

import pytest
import torch

from gpse_dgl.utils import memory


def test_a_large_buffer_is_advised_over_its_whole_huge_pages(monkeypatch):
    calls = []
    monkeypatch.setattr(memory, "_madvise", lambda: lambda start, length, advice: calls.append((start, length,
                                                                                               advice)) or 0)
    buf = memory.empty((10000, 1024), dtype=torch.float32)  # 41 MB
    assert buf.shape == (10000, 1024) and buf.dtype == torch.float32
    (start, length, advice), = calls
    begin, end = buf.data_ptr(), buf.data_ptr() + buf.numel() * 4
    assert start % memory.HUGE_PAGE_BYTES == 0 and length % memory.HUGE_PAGE_BYTES == 0
    assert begin <= start and start + length <= end and length >= end - begin - 2 * memory.HUGE_PAGE_BYTES
    assert advice == 14  # MADV_HUGEPAGE


@pytest.mark.parametrize("shape, device", [((8, 8), "cpu"), ((3000, 1024), "cpu"), ((10000, 1024), "meta")])
def test_small_or_non_host_buffers_are_plain(monkeypatch, shape, device):
    calls = []
    monkeypatch.setattr(memory, "_madvise", lambda: lambda *args: calls.append(args) or 0)
    buf = memory.empty(shape, dtype=torch.float32, device=device)
    assert buf.shape == shape and buf.device.type == device and calls == []


def test_without_huge_pages_it_is_torch_empty(monkeypatch):
    monkeypatch.setattr(memory, "_madvise", lambda: None)
    assert not memory.huge_pages_available()
    buf = memory.empty((3000, 1024), dtype=torch.bfloat16)
    assert buf.shape == (3000, 1024) and buf.dtype == torch.bfloat16


def test_values_written_to_an_advised_buffer_read_back():
    data = torch.randn(4096, 512)
    buf = memory.empty(data.shape)
    buf.copy_(data)
    assert torch.equal(buf, data)


def test_available_bytes_reads_meminfo():
    """MemAvailable on Linux (a positive count of bytes below the machine's total), None elsewhere."""
    free = memory.available_bytes()
    if not sys.platform.startswith("linux"):
        assert free is None
        return
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert isinstance(free, int) and 0 < free <= total


def test_a_cgroup_limit_lowers_the_memory_available(tmp_path, monkeypatch):
    """In a container the cgroup's limit less its use counts where it is below MemAvailable; "max" is no limit."""
    limit, usage = tmp_path / "memory.max", tmp_path / "memory.current"
    monkeypatch.setattr(memory, "_CGROUP_FILES", ((str(limit), str(usage)),))
    monkeypatch.setattr(memory, "_meminfo_available", lambda: 8 << 30)
    usage.write_text("1073741824\n")
    limit.write_text("3221225472\n")
    assert memory.available_bytes() == 2 << 30
    limit.write_text("max\n")
    assert memory.available_bytes() == 8 << 30
    monkeypatch.setattr(memory, "_meminfo_available", lambda: None)
    assert memory.available_bytes() is None
