"""cgroup v2 device programs by hand: bpf(2) through ctypes, no libbpf, no compiler (test code).

Used by the lab's legacy hook (:mod:`tests.syslab`, ``__hook``) on the unified layout, where
libnvidia-container (nvcgo ``AddDeviceRules``) does not write ``devices.allow`` but, for every
``BPF_PROG_TYPE_CGROUP_DEVICE`` program attached to the container's cgroup, loads a copy with "allow
the GPU" rules in front of it, detaches the old one and attaches the copy (``BPF_F_ALLOW_MULTI``).
:func:`replace` does the same with our own prologue; the copies are named ``lab_gpu_repl``.

Layouts of ``union bpf_attr`` and ``struct bpf_prog_info`` are those of linux/bpf.h (x86_64 syscall
number 321). The program's context is ``struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32
minor;}`` with ``access_type = access << 16 | type`` (type 2 = char; access bit 1 = mknod).
"""
from __future__ import annotations

import ctypes
import os
import struct

NR_BPF = 321
PROG_LOAD, PROG_ATTACH, PROG_DETACH, PROG_GET_FD_BY_ID, OBJ_GET_INFO_BY_FD, PROG_QUERY = 5, 8, 9, 13, 15, 16
PROG_TYPE_CGROUP_DEVICE, ATTACH_CGROUP_DEVICE, F_ALLOW_MULTI = 15, 6, 2
REPLACED_NAME = "lab_gpu_repl"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr) -> int:
    r = _libc.syscall(ctypes.c_long(NR_BPF), ctypes.c_long(cmd), ctypes.c_void_p(ctypes.addressof(attr)),
                      ctypes.c_long(ctypes.sizeof(attr)))
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"bpf({cmd}): {os.strerror(e)}")
    return r


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | (src << 4), off, imm)


def gpu_prologue(major: int, minors: list[int]) -> bytes:
    """Instructions returning 1 for ``c major:minor`` (minor in ``minors``) opened without mknod, and
    falling through to whatever follows them otherwise (r1, the context, is kept)."""
    n = 9 + len(minors) + 2                      # fixed part, the minor tests, "allow" (2)
    orig = lambda pc: n - pc - 1                 # noqa: E731  (jump offset to the first instruction after)
    code = [
        _insn(0x69, 2, 1, 0),                    # r2 = *(u16 *)(r1 + 0)   type
        _insn(0x61, 3, 1, 0),                    # r3 = *(u32 *)(r1 + 0)
        _insn(0x74, 3, 0, 0, 16),                # w3 >>= 16                access
        _insn(0x61, 4, 1, 4),                    # r4 = major
        _insn(0x61, 5, 1, 8),                    # r5 = minor
        _insn(0x55, 2, 0, orig(5), 2),           # if r2 != char goto orig
        _insn(0x55, 4, 0, orig(6), major),       # if r4 != major goto orig
        _insn(0x45, 3, 0, orig(7), 1),           # if r3 & mknod goto orig
    ]
    for i, m in enumerate(minors):
        code.append(_insn(0x15, 5, 0, (n - 2) - (8 + i) - 1, m))   # if r5 == m goto allow
    code.append(_insn(0x05, 0, 0, orig(8 + len(minors))))          # goto orig
    code += [_insn(0xb7, 0, 0, 0, 1), _insn(0x95)]                 # allow: r0 = 1; exit
    assert len(code) == n
    return b"".join(code)


def _load(code: bytes, name: str) -> int:
    ins = ctypes.create_string_buffer(code, len(code))
    lic = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(1 << 16)
    a = ctypes.create_string_buffer(128)
    struct.pack_into("<IIQQIIQII16s", a, 0, PROG_TYPE_CGROUP_DEVICE, len(code) // 8, ctypes.addressof(ins),
                     ctypes.addressof(lic), 1, len(log), ctypes.addressof(log), 0, 0, name.encode()[:15])
    try:
        return _bpf(PROG_LOAD, a)
    except OSError as e:
        raise OSError(e.errno, f"BPF_PROG_LOAD {name}: {e.strerror}; verifier: "
                               f"{log.value.decode(errors='replace')[-1500:]}") from None


def attached(cgfd: int) -> list[int]:
    """Ids of the device programs attached to the cgroup open as ``cgfd`` (BPF_PROG_QUERY)."""
    ids = (ctypes.c_uint32 * 64)()
    a = ctypes.create_string_buffer(128)
    struct.pack_into("<IIIIQI", a, 0, cgfd, ATTACH_CGROUP_DEVICE, 0, 0, ctypes.addressof(ids), 64)
    _bpf(PROG_QUERY, a)
    return list(ids[:struct.unpack_from("<I", a, 24)[0]])


def _fd_by_id(prog_id: int) -> int:
    a = ctypes.create_string_buffer(128)
    struct.pack_into("<I", a, 0, prog_id)
    return _bpf(PROG_GET_FD_BY_ID, a)


def info(fd: int) -> dict:
    """``{"id", "name", "code"}`` of a loaded program: ``code`` its xlated instructions (bytes)."""
    def get(xlen=0, buf_addr=0):
        out = ctypes.create_string_buffer(256)
        struct.pack_into("<I", out, 20, xlen)
        struct.pack_into("<Q", out, 32, buf_addr)
        a = ctypes.create_string_buffer(128)
        struct.pack_into("<IIQ", a, 0, fd, len(out), ctypes.addressof(out))
        _bpf(OBJ_GET_INFO_BY_FD, a)
        return out
    first = get()
    xlen = struct.unpack_from("<I", first, 20)[0]
    code = ctypes.create_string_buffer(max(xlen, 1))
    get(xlen, ctypes.addressof(code))
    return {"id": struct.unpack_from("<I", first, 4)[0], "name": first.raw[64:80].split(b"\0")[0].decode(),
            "code": code.raw[:xlen]}


def _attach(cmd: int, cgfd: int, pfd: int) -> None:
    a = ctypes.create_string_buffer(128)
    struct.pack_into("<IIII", a, 0, cgfd, pfd, ATTACH_CGROUP_DEVICE, F_ALLOW_MULTI if cmd == PROG_ATTACH else 0)
    _bpf(cmd, a)


def replace(cgdir: str, major: int = 195, minors: tuple[int, ...] = (255, 0)) -> list[int]:
    """Replace every device program on ``cgdir`` by a copy that also allows ``c major:minors`` (rw, no
    mknod); detach the old ones first, then attach the copies (nvcgo's order). Returns the new ids.
    Raises OSError (e.g. EPERM without CAP_SYS_ADMIN, or no xlated code under kptr_restrict)."""
    cgfd = os.open(cgdir, os.O_RDONLY | os.O_DIRECTORY)
    fds = []
    try:
        old = []
        for pid in attached(cgfd):
            fd = _fd_by_id(pid)
            fds.append(fd)
            old.append((fd, info(fd)["code"]))
        prologue = gpu_prologue(major, list(minors))
        bodies = [c for _, c in old] or [_insn(0xb7, 0, 0, 0, 1) + _insn(0x95)]
        new = [_load(prologue + body, REPLACED_NAME) for body in bodies]
        fds += new
        for fd, _ in old:
            _attach(PROG_DETACH, cgfd, fd)
        for fd in new:
            _attach(PROG_ATTACH, cgfd, fd)
        return attached(cgfd)
    finally:
        for fd in fds:
            os.close(fd)
        os.close(cgfd)
