"""Checks that a file is a Lambda bootstrap for provided.al2023 on arm64.

    python3 check_elf.py PATH [--machine aarch64] [--max-glibc 2.34]

Reads the ELF headers itself (no readelf, no third-party module) and checks:

- an ELF64, little-endian, executable (ET_EXEC or ET_DYN with an entry point)
  for the machine asked (EM_AARCH64 = 183 for `aarch64`, EM_X86_64 = 62 for
  `x86_64`);
- every symbol version it needs from the GNU C library (`GLIBC_x.y` in its
  .gnu.version_r section, the versions the dynamic loader checks at start)
  is at most --max-glibc: provided.al2023 ships glibc 2.34, and a binary
  needing a newer symbol fails there at start with "version `GLIBC_2.xx' not
  found", before the handler runs;
- if dynamically linked, its interpreter (PT_INTERP) is the machine's
  standard loader (/lib/ld-linux-aarch64.so.1 for aarch64).

Prints one JSON object on stdout: {"path", "bytes", "machine", "type",
"interpreter", "needed" (DT_NEEDED libraries), "glibc_versions" (sorted),
"max_glibc", "ok", "problems"}; exits 0 when ok, 1 with the problems on
stderr otherwise, 2 when the file cannot be read as ELF at all.
"""
import argparse
import json
import os
import struct
import sys

MACHINES = {"aarch64": 183, "x86_64": 62}
MACHINE_NAMES = {v: k for k, v in MACHINES.items()}
LOADERS = {"aarch64": "/lib/ld-linux-aarch64.so.1", "x86_64": "/lib64/ld-linux-x86-64.so.2"}
SHT_DYNAMIC, SHT_GNU_VERNEED = 6, 0x6FFFFFFE
PT_INTERP, DT_NEEDED = 3, 1
ET_EXEC, ET_DYN = 2, 3


class NotElf(Exception):
    pass


def version_tuple(v):
    return tuple(int(x) for x in v.split("."))


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        raise NotElf(f"{path} is not an ELF file (magic {data[:4]!r})")
    if data[4] != 2 or data[5] != 1:
        raise NotElf(f"{path} is not a 64-bit little-endian ELF (class {data[4]}, data {data[5]})")
    (e_type, e_machine, _v, e_entry, e_phoff, e_shoff, _flags, _ehsize, e_phentsize, e_phnum,
     e_shentsize, e_shnum, _shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)

    def cstr(off):
        end = data.index(b"\0", off)
        return data[off:end].decode()

    interpreter = None
    for i in range(e_phnum):
        p_type, _pf, p_offset, _va, _pa, p_filesz, _memsz, _align = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + i * e_phentsize)
        if p_type == PT_INTERP:
            interpreter = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()

    sections = []
    for i in range(e_shnum):
        (_name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, sh_info, _align,
         sh_entsize) = struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
        sections.append((sh_type, sh_offset, sh_size, sh_link, sh_info, sh_entsize))

    needed, versions = [], set()
    for sh_type, off, size, link, info, entsize in sections:
        strtab = sections[link][1]
        if sh_type == SHT_DYNAMIC:
            for j in range(size // 16):
                tag, val = struct.unpack_from("<qQ", data, off + j * 16)
                if tag == DT_NEEDED:
                    needed.append(cstr(strtab + val))
                if tag == 0:
                    break
        elif sh_type == SHT_GNU_VERNEED:
            # Elf64_Verneed {vn_version, vn_cnt, vn_file, vn_aux, vn_next},
            # then vn_cnt Elf64_Vernaux {vna_hash, vna_flags, vna_other, vna_name, vna_next}.
            at = off
            for _ in range(info):
                _ver, cnt, _file, aux, nxt = struct.unpack_from("<HHIII", data, at)
                a = at + aux
                for _ in range(cnt):
                    _hash, _f, _other, name, anext = struct.unpack_from("<IHHII", data, a)
                    versions.add(cstr(strtab + name))
                    a += anext
                at += nxt
    return {
        "bytes": len(data),
        "type": {ET_EXEC: "executable", ET_DYN: "shared object or PIE"}.get(e_type, f"type {e_type}"),
        "e_type": e_type,
        "entry": e_entry,
        "machine": MACHINE_NAMES.get(e_machine, f"machine {e_machine}"),
        "interpreter": interpreter,
        "needed": needed,
        "versions": versions,
    }


def check(path, machine, max_glibc):
    info = read(path)
    glibc = sorted((v for v in info["versions"] if v.startswith("GLIBC_") and v[6:7].isdigit()),
                   key=lambda v: version_tuple(v[6:]))
    problems = []
    if info["machine"] != machine:
        problems.append(f"built for {info['machine']}, not {machine}")
    if info["e_type"] not in (ET_EXEC, ET_DYN) or not info["entry"]:
        problems.append(f"not an executable ({info['type']}, entry {info['entry']:#x})")
    too_new = [v for v in glibc if version_tuple(v[6:]) > version_tuple(max_glibc)]
    if too_new:
        problems.append(f"needs {', '.join(too_new)}: newer than glibc {max_glibc} (--max-glibc; "
                        "provided.al2023 has 2.34)")
    loader = LOADERS.get(machine)
    if info["interpreter"] is not None and loader and info["interpreter"] != loader:
        problems.append(f"interpreter {info['interpreter']}, not {loader}")
    return {
        "path": path,
        "bytes": info["bytes"],
        "machine": info["machine"],
        "type": info["type"],
        "interpreter": info["interpreter"],
        "needed": info["needed"],
        "glibc_versions": glibc,
        "max_glibc": glibc[-1][6:] if glibc else None,
        "ok": not problems,
        "problems": problems,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("path")
    ap.add_argument("--machine", default="aarch64", choices=sorted(MACHINES))
    ap.add_argument("--max-glibc", default="2.34")
    args = ap.parse_args()
    if not os.path.isfile(args.path):
        print(f"check_elf: no file {args.path}", file=sys.stderr)
        sys.exit(2)
    try:
        result = check(args.path, args.machine, args.max_glibc)
    except (NotElf, struct.error, ValueError, IndexError) as e:
        print(f"check_elf: {e}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(result))
    if not result["ok"]:
        print(f"check_elf: {args.path}: {'; '.join(result['problems'])}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
