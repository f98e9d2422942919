"""Take the network away from the calling process: a seccomp filter that refuses ``socket()`` for
every address family but AF_UNIX (EPERM), and io_uring, which could open sockets without that call.

pyoxigraph is built with its HTTP client and evaluates ``SERVICE`` with it; it offers no way to
turn that off, and a query cannot be vetted by reading its text (the grammar has too many
spellings). So the process that evaluates queries has no network: what it cannot open, no query
can reach. Standard library only, so it can run before anything else is imported.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import socket
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
X32_SYSCALL_BIT = 0x40000000

# machine -> (AUDIT_ARCH of seccomp_data.arch, socket, io_uring_setup); only where both are known
ARCHES = {
    "x86_64": (0xC000003E, 41, 425),
    "aarch64": (0xC00000B7, 198, 425),
}

# classic BPF
LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JGE_K = 0x35  # BPF_JMP | BPF_JGE | BPF_K
RET_K = 0x06  # BPF_RET | BPF_K
NR, ARCH, ARG0 = 0, 4, 16  # offsets in struct seccomp_data (arg 0's low half, little-endian)


class SandboxUnavailable(RuntimeError):
    """The filter could not be installed here: the caller must not evaluate queries."""


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as (code, jt, jf, k) instructions."""
    if machine not in ARCHES:
        raise SandboxUnavailable(f"no seccomp filter for this machine ({machine or 'unknown'})")
    arch, sock, uring = ARCHES[machine]
    deny = SECCOMP_RET_ERRNO | errno.EPERM
    return [
        (LD_W_ABS, 0, 0, ARCH),
        (JEQ_K, 1, 0, arch),  # another ABI (i386 int 0x80 on x86_64): nothing at all
        (RET_K, 0, 0, deny),
        (LD_W_ABS, 0, 0, NR),
        (JGE_K, 5, 0, X32_SYSCALL_BIT),  # x32 syscalls on x86_64 (none on aarch64): refused
        (JEQ_K, 4, 0, uring),
        (JEQ_K, 1, 0, sock),
        (RET_K, 0, 0, SECCOMP_RET_ALLOW),
        (LD_W_ABS, 0, 0, ARG0),
        (JEQ_K, 1, 0, socket.AF_UNIX),  # local sockets only
        (RET_K, 0, 0, deny),
        (RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]


def deny_network() -> None:
    """Install the filter on this process (before it starts any thread), then prove it: an AF_INET
    socket must now fail with EPERM. Also ask for SIGKILL when the parent dies, so a child busy
    with a query never outlives it. Raises SandboxUnavailable when any of it fails."""
    machine = platform.machine()
    code = program(machine)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    filters = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *i) for i in code))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxP", len(code), ctypes.addressof(filters)))
    libc.prctl(PR_SET_PDEATHSIG, 9, None, 0, 0)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, None, 0, 0) != 0:
        raise SandboxUnavailable(
            f"prctl(PR_SET_NO_NEW_PRIVS) refused: {errno.errorcode.get(ctypes.get_errno())}"
        )
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise SandboxUnavailable(f"prctl(PR_SET_SECCOMP) refused: {errno.errorcode.get(ctypes.get_errno())}")
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    except PermissionError:
        return
    raise SandboxUnavailable("the seccomp filter is installed but an AF_INET socket still opens")
