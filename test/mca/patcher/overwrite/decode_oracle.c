/*
 * Our x86 decoder against Zydis, over the entry of every function that
 * the system libraries export: for the first bytes of each (up to the end
 * of straight-line flow), every instruction must have the same length and
 * the same RIP-relative / branch target in both decoders, or ours must say
 * "cannot decode" (the relocator then declines).  Any disagreement fails.
 * x86-64 libraries are decoded in 64-bit mode, i386 ones (the cross
 * toolchain's and the biarch /lib32, where installed) in 32-bit mode.
 * Then the same comparison over a few hand-written encodings that those
 * libraries do not show.
 *
 * Usage: decode_oracle [library ...]   (default: a list of system libraries)
 */
#include "opal_config.h"

#include <elf.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <Zydis/Zydis.h>

#include "opal/mca/patcher/overwrite/patcher_overwrite_x86_decode.h"
#include "test/support/test_util.h"

#define WINDOW 48

static const char *default_libs[] = {
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libstdc++.so.6",
    "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib/x86_64-linux-gnu/libz.so.1",
    "/lib/x86_64-linux-gnu/libcrypto.so.3",
    "/lib/x86_64-linux-gnu/liblzma.so.5",
    "/lib/x86_64-linux-gnu/libzstd.so.1",
    "/lib/x86_64-linux-gnu/libgmp.so.10",
    "/usr/i686-linux-gnu/lib/libc.so.6",
    "/usr/i686-linux-gnu/lib/libm.so.6",
    "/usr/i686-linux-gnu/lib/libstdc++.so.6",
    "/usr/i686-linux-gnu/lib/libgcc_s.so.1",
    "/usr/i686-linux-gnu/lib/libgomp.so.1",
    "/usr/lib32/libc.so.6",
    "/usr/lib32/libstdc++.so.6",
    NULL,
};

struct counts {
    unsigned long libs, functions, insns, riprel, branches, declined, mismatches;
};

/* One library being walked: its image, and the mode its code runs in. */
typedef struct elf_t {
    const uint8_t *img;
    size_t size;
    bool is32;
} elf_t;

static ZydisDecoder zydis64, zydis32;

static mca_patcher_x86_mode_t mode_of(const elf_t *e)
{
    return e->is32 ? MCA_PATCHER_X86_MODE_32 : MCA_PATCHER_X86_MODE_64;
}

/* Compare one instruction; returns false to stop walking this function. */
static bool compare_one(const elf_t *e, const char *lib, const char *name, uint64_t addr,
                        const uint8_t *code, size_t avail, struct counts *c)
{
    mca_patcher_x86_insn_t ours;
    size_t len = mca_patcher_x86_decode(code, avail, mode_of(e), &ours);
    if (len == 0) {
        /* Cut short by the end of the window is not a decline. */
        if (avail >= 15) {
            c->declined++;
            if (getenv("DECODE_ORACLE_VERBOSE")) {
                fprintf(stderr, "declined %s %s+0x%lx: %02x %02x %02x %02x %02x\n", lib, name,
                        (unsigned long) addr, code[0], code[1], code[2], code[3], code[4]);
            }
        }
        return false;
    }

    ZydisDecodedInstruction zi;
    ZydisDecodedOperand zops[ZYDIS_MAX_OPERAND_COUNT];
    if (!ZYAN_SUCCESS(
            ZydisDecoderDecodeFull(e->is32 ? &zydis32 : &zydis64, code, avail, &zi, zops))) {
        c->mismatches++;
        fprintf(stderr, "MISMATCH %s %s+0x%lx: we decode %zu bytes (%s), Zydis cannot\n", lib,
                name, (unsigned long) addr, len, mca_patcher_x86_kind_name(ours.kind));
        return false;
    }
    c->insns++;

    /* What Zydis says is PC relative: a branch target, or a [rip+disp] operand. */
    bool z_branch = false, z_riprel = false;
    uint64_t z_target = 0;
    for (unsigned k = 0; k < zi.operand_count; k++) {
        const ZydisDecodedOperand *o = &zops[k];
        if (o->type == ZYDIS_OPERAND_TYPE_IMMEDIATE && o->imm.is_relative) {
            z_branch = true;
            ZydisCalcAbsoluteAddress(&zi, o, addr, &z_target);
        } else if (o->type == ZYDIS_OPERAND_TYPE_MEMORY && o->mem.base == ZYDIS_REGISTER_RIP) {
            z_riprel = true;
            ZydisCalcAbsoluteAddress(&zi, o, addr, &z_target);
        }
    }
    bool o_branch = ours.kind == MCA_PATCHER_X86_JMP || ours.kind == MCA_PATCHER_X86_JCC ||
                    ours.kind == MCA_PATCHER_X86_CALL || ours.kind == MCA_PATCHER_X86_LOOP;
    uint64_t o_target = addr + len + (int64_t) ours.rel;
    if (e->is32) { /* EIP wraps at 4 GiB */
        o_target &= UINT32_MAX;
        z_target &= UINT32_MAX;
    }

    bool same = zi.length == len && z_branch == o_branch && z_riprel == (ours.riprel != 0);
    if (same && (z_branch || z_riprel)) {
        same = z_target == o_target;
    }
    if (!same) {
        c->mismatches++;
        fprintf(stderr,
                "MISMATCH %s %s+0x%lx:", lib, name, (unsigned long) addr);
        for (size_t k = 0; k < (zi.length > len ? zi.length : len) && k < avail; k++) {
            fprintf(stderr, " %02x", code[k]);
        }
        fprintf(stderr, ": Zydis len %u branch %d riprel %d target 0x%lx; ours len %zu %s target 0x%lx\n",
                zi.length, z_branch, z_riprel, (unsigned long) z_target, len,
                mca_patcher_x86_kind_name(ours.kind), (unsigned long) o_target);
        return false;
    }
    c->riprel += z_riprel;
    c->branches += z_branch;
    /* Past an unconditional transfer the bytes need not be code. */
    return ours.kind != MCA_PATCHER_X86_JMP && ours.kind != MCA_PATCHER_X86_JMP_IND &&
           ours.kind != MCA_PATCHER_X86_END;
}

/* Compare the instructions from code on, to the end of straight-line flow. */
static void walk(const elf_t *e, const char *lib, const char *name, uint64_t addr,
                 const uint8_t *code, size_t avail, struct counts *c)
{
    size_t off = 0;
    while (off < avail && compare_one(e, lib, name, addr + off, code + off, avail - off, c)) {
        mca_patcher_x86_insn_t insn;
        off += mca_patcher_x86_decode(code + off, avail - off, mode_of(e), &insn);
    }
}

/*
 * Encodings the libraries do not show, each walked like a function's entry
 * (a ret follows).  With 0x66 and REX.W the operand is 64-bit: REX.W wins,
 * the immediate stays 4 bytes; 0x66 alone makes it 2.
 */
typedef struct hand_written_t {
    const char *name;
    bool is32;
    uint8_t code[16];
} hand_written_t;

static const hand_written_t hand_written[] = {
    {"66 48 05 id (add)", false, {0x66, 0x48, 0x05, 1, 2, 3, 4, 0xc3}},
    {"66 48 81 c0 id (add)", false, {0x66, 0x48, 0x81, 0xc0, 1, 2, 3, 4, 0xc3}},
    {"66 48 c7 c0 id (mov)", false, {0x66, 0x48, 0xc7, 0xc0, 1, 2, 3, 4, 0xc3}},
    {"66 48 f7 c0 id (test)", false, {0x66, 0x48, 0xf7, 0xc0, 1, 2, 3, 4, 0xc3}},
    {"66 48 a9 id (test)", false, {0x66, 0x48, 0xa9, 1, 2, 3, 4, 0xc3}},
    {"66 48 69 c0 id (imul)", false, {0x66, 0x48, 0x69, 0xc0, 1, 2, 3, 4, 0xc3}},
    {"66 48 68 id (push)", false, {0x66, 0x48, 0x68, 1, 2, 3, 4, 0xc3}},
    {"66 48 81 3d disp32 id (cmp, rip-relative)",
     false,
     {0x66, 0x48, 0x81, 0x3d, 0x10, 0, 0, 0, 1, 2, 3, 4, 0xc3}},
    {"66 81 c0 iw (add)", false, {0x66, 0x81, 0xc0, 1, 2, 0xc3}},
    {"66 f7 c0 iw (test)", true, {0x66, 0xf7, 0xc0, 1, 2, 0xc3}},
};

static void check_hand_written(struct counts *c)
{
    for (size_t k = 0; k < sizeof(hand_written) / sizeof(hand_written[0]); k++) {
        const hand_written_t *h = &hand_written[k];
        const elf_t e = {.is32 = h->is32};
        c->functions++;
        walk(&e, "hand-written", h->name, 0x401000, h->code, sizeof(h->code), c);
    }
    printf("hand-written encodings %lu  instructions %lu  declined %lu  mismatches %lu\n",
           c->functions, c->insns, c->declined, c->mismatches);
    CHECK_MSG(c->mismatches == 0, "%lu hand-written encodings decoded differently from Zydis",
              c->mismatches);
}

/* What the walk reads of the ELF headers, in either class. */
typedef struct seg_t {
    uint64_t type, offset, vaddr, filesz;
} seg_t;
typedef struct sect_t {
    uint64_t type, link, offset, size;
} sect_t;
typedef struct sym_t {
    uint64_t name, info, shndx, value;
} sym_t;

/* Field f of the record that p32 or p64 points to, by the class of e. */
#define FIELD(e, p32, p64, f) ((e)->is32 ? (uint64_t) (p32)->f : (uint64_t) (p64)->f)
#define EHDR(e, f)            FIELD(e, (const Elf32_Ehdr *) (e)->img, (const Elf64_Ehdr *) (e)->img, f)

static seg_t segment(const elf_t *e, unsigned k)
{
    const Elf32_Phdr *p32 = (const Elf32_Phdr *) (e->img + EHDR(e, e_phoff)) + k;
    const Elf64_Phdr *p64 = (const Elf64_Phdr *) (e->img + EHDR(e, e_phoff)) + k;
    return (seg_t){FIELD(e, p32, p64, p_type), FIELD(e, p32, p64, p_offset),
                   FIELD(e, p32, p64, p_vaddr), FIELD(e, p32, p64, p_filesz)};
}

static sect_t section(const elf_t *e, unsigned k)
{
    const Elf32_Shdr *s32 = (const Elf32_Shdr *) (e->img + EHDR(e, e_shoff)) + k;
    const Elf64_Shdr *s64 = (const Elf64_Shdr *) (e->img + EHDR(e, e_shoff)) + k;
    return (sect_t){FIELD(e, s32, s64, sh_type), FIELD(e, s32, s64, sh_link),
                    FIELD(e, s32, s64, sh_offset), FIELD(e, s32, s64, sh_size)};
}

static size_t sym_count(const elf_t *e, const sect_t *s)
{
    return s->size / (e->is32 ? sizeof(Elf32_Sym) : sizeof(Elf64_Sym));
}

static sym_t symbol(const elf_t *e, const sect_t *s, size_t k)
{
    const Elf32_Sym *y32 = (const Elf32_Sym *) (e->img + s->offset) + k;
    const Elf64_Sym *y64 = (const Elf64_Sym *) (e->img + s->offset) + k;
    return (sym_t){FIELD(e, y32, y64, st_name), FIELD(e, y32, y64, st_info),
                   FIELD(e, y32, y64, st_shndx), FIELD(e, y32, y64, st_value)};
}

/* File offset and bytes available for a virtual address, from the PT_LOAD headers. */
static const uint8_t *code_at(const elf_t *e, uint64_t vaddr, size_t *avail)
{
    for (unsigned k = 0; k < EHDR(e, e_phnum); k++) {
        seg_t ph = segment(e, k);
        if (ph.type == PT_LOAD && vaddr >= ph.vaddr && vaddr < ph.vaddr + ph.filesz) {
            uint64_t off = vaddr - ph.vaddr + ph.offset;
            uint64_t end = ph.offset + ph.filesz;
            if (off >= e->size || end > e->size) {
                return NULL;
            }
            *avail = end - off < WINDOW ? end - off : WINDOW;
            return e->img + off;
        }
    }
    return NULL;
}

/* Walk every exported function's entry; counts go to c[0] (64-bit) or c[1] (32-bit). */
static bool check_library(const char *path, struct counts *counts)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return false;
    }
    struct stat st;
    fstat(fd, &st);
    const uint8_t *img = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK_MSG(img != MAP_FAILED, "cannot map %s", path);
    if (img == MAP_FAILED) {
        return false;
    }
    const Elf32_Ehdr *eh32 = (const Elf32_Ehdr *) img; /* e_ident and e_machine: both classes */
    elf_t e = {.img = img, .size = st.st_size, .is32 = eh32->e_ident[EI_CLASS] == ELFCLASS32};
    bool ok = memcmp(eh32->e_ident, ELFMAG, SELFMAG) == 0 &&
              eh32->e_machine == (e.is32 ? EM_386 : EM_X86_64);
    CHECK_MSG(ok, "%s is not an x86-64 or i386 ELF object", path);
    if (!ok) {
        munmap((void *) img, st.st_size);
        return false;
    }
    struct counts *c = &counts[e.is32], before = *c;
    for (unsigned s = 0; s < EHDR(&e, e_shnum); s++) {
        sect_t sh = section(&e, s);
        if (sh.type != SHT_DYNSYM) {
            continue;
        }
        const char *strtab = (const char *) img + section(&e, sh.link).offset;
        size_t n = sym_count(&e, &sh);
        uint64_t *seen = calloc(n, sizeof(*seen));
        size_t nseen = 0;
        for (size_t k = 0; k < n; k++) {
            sym_t sym = symbol(&e, &sh, k);
            /* ELF32_ST_TYPE and ELF64_ST_TYPE are the same: the low nibble. */
            if (ELF64_ST_TYPE(sym.info) != STT_FUNC || sym.shndx == SHN_UNDEF || sym.value == 0) {
                continue;
            }
            /* Aliases share an entry: walk each address once. */
            bool dup = false;
            for (size_t d = 0; d < nseen && !dup; d++) {
                dup = seen[d] == sym.value;
            }
            if (dup) {
                continue;
            }
            seen[nseen++] = sym.value;
            size_t avail;
            const uint8_t *code = code_at(&e, sym.value, &avail);
            if (!code) {
                continue;
            }
            c->functions++;
            walk(&e, path, strtab + sym.name, sym.value, code, avail, c);
        }
        free(seen);
    }
    c->libs++;
    printf("%-45s %s functions %6lu  instructions %7lu  rip-relative %6lu  branches %6lu  "
           "declined %5lu  mismatches %lu\n",
           path, e.is32 ? "32-bit" : "64-bit", c->functions - before.functions,
           c->insns - before.insns, c->riprel - before.riprel, c->branches - before.branches,
           c->declined - before.declined, c->mismatches - before.mismatches);
    munmap((void *) img, st.st_size);
    return true;
}

int main(int argc, char **argv)
{
    ZydisDecoderInit(&zydis64, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    ZydisDecoderInit(&zydis32, ZYDIS_MACHINE_MODE_LONG_COMPAT_32, ZYDIS_STACK_WIDTH_32);
    struct counts hand = {0}, c[2] = {{0}};
    check_hand_written(&hand);
    if (argc > 1) {
        for (int k = 1; k < argc; k++) {
            check_library(argv[k], c);
        }
    } else {
        for (const char **p = default_libs; *p; p++) {
            check_library(*p, c);
        }
    }
    for (int m = 0; m < 2; m++) {
        const char *mode = m ? "32-bit" : "64-bit";
        if (c[m].libs == 0) {
            printf("%s mode: no library found to check\n", mode);
            continue;
        }
        printf("%s mode: %lu libraries, %lu functions, %lu instructions (%lu rip-relative, %lu "
               "branches), %lu declined, %lu mismatches\n",
               mode, c[m].libs, c[m].functions, c[m].insns, c[m].riprel, c[m].branches,
               c[m].declined, c[m].mismatches);
        CHECK_MSG(c[m].mismatches == 0, "%s mode: %lu instructions decoded differently from Zydis",
                  mode, c[m].mismatches);
        /* The decoder must be useful, not just cautious: declines stay rare. */
        CHECK_MSG(c[m].declined * 20 < c[m].functions, "%s mode: %lu of %lu functions declined",
                  mode, c[m].declined, c[m].functions);
    }
    return test_finish("decode_oracle");
}
