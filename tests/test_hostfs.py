"""Reads under --root never leave the root and never block."""
from __future__ import annotations

import os
import threading

import pytest

from forensics import hostfs


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "root"
    (r / "etc").mkdir(parents=True)
    (tmp_path / "secret").write_text("host secret\n")
    (r / "etc/ok").write_text("inside\n")
    return r


@pytest.mark.parametrize("target", ["/etc/ok", "../../../../etc/ok", "/../etc/ok"])
def test_links_resolve_inside_root(root, target):
    os.symlink(target, root / "etc/link")
    assert hostfs.read_text(root, "/etc/link") == "inside\n"


def test_absolute_link_to_host_file_is_taken_relative_to_root(root, tmp_path):
    os.symlink(str(tmp_path / "secret"), root / "etc/escape")
    with pytest.raises(FileNotFoundError):
        hostfs.read_text(root, "/etc/escape")


def test_dotdot_cannot_climb_out(root):
    with pytest.raises(FileNotFoundError):
        hostfs.read_text(root, "/../secret")


def test_link_loop_raises_eloop(root):
    os.symlink("b", root / "etc/a")
    os.symlink("a", root / "etc/b")
    with pytest.raises(OSError) as e:
        hostfs.read_text(root, "/etc/a")
    assert e.value.errno == 40


def test_fifo_never_blocks(root):
    os.mkfifo(root / "etc/fifo")
    done = []
    t = threading.Thread(target=lambda: done.append(pytest.raises(hostfs.NotRegularFile,
                                                                  hostfs.read_text, root, "/etc/fifo")))
    t.start()
    t.join(5)
    assert done, "opening a FIFO blocked"


def test_localtime_style_link(root):
    (root / "usr/share/zoneinfo/Asia").mkdir(parents=True)
    (root / "usr/share/zoneinfo/Asia/Seoul").write_bytes(b"TZif2")
    os.symlink("/usr/share/zoneinfo/Asia/Seoul", root / "etc/localtime")
    assert hostfs.readlink(root, "/etc/localtime") == "/usr/share/zoneinfo/Asia/Seoul"
    with hostfs.open_regular(root, "/etc/localtime") as f:
        assert f.read() == b"TZif2"


@pytest.mark.parametrize("size", [0, 1, 99, 100, 101, (1 << 16) + 3, 3 * (1 << 16)])
@pytest.mark.parametrize("limit", [1, 100, 101, 1 << 16, 1 << 20])
def test_read_upto_returns_what_read_does(tmp_path, size, limit):
    """read_upto reads in pieces sized by fstat; the bytes are those of one f.read(limit)."""
    p = tmp_path / "f"
    p.write_bytes(bytes(i % 251 for i in range(size)))
    with open(p, "rb") as a, open(p, "rb") as b:
        got, want = hostfs.read_upto(a, limit), b.read(limit)
        assert got == want and len(got) == min(size, limit)
        assert a.tell() == b.tell()  # the next read starts where read(limit) would have left it


def test_read_upto_reads_a_proc_file_whose_size_is_zero():
    """/proc files state a size of 0: their text is read whole all the same (and bounded)."""
    assert os.stat("/proc/self/mountinfo").st_size == 0
    with open("/proc/self/mountinfo", "rb") as f:
        text = hostfs.read_upto(f, 1 << 20)
    assert b" - " in text and text.count(b"\n") >= 1
    with open("/proc/self/mountinfo", "rb") as f:
        assert hostfs.read_upto(f, 5) == text[:5]
