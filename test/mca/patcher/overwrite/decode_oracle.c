/*
 * Our x86-64 decoder against Zydis, over the entry of every function that
 * the system libraries export: for the first bytes of each (up to the end
 * of straight-line flow), every instruction must have the same length and
 * the same RIP-relative / branch target in both decoders, or ours must say
 * "cannot decode" (the relocator then declines).  Any disagreement fails.
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

#include "opal/mca/patcher/overwrite/patcher_overwrite_x86_64_decode.h"
#include "test/support/test_util.h"

#define WINDOW 48

static const char *default_libs[] = {
    "/lib/x86_64-linux-gnu/libc.so.6",     "/lib/x86_64-linux-gnu/libm.so.6",
    "/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib/x86_64-linux-gnu/libgcc_s.so.1",
    "/lib/x86_64-linux-gnu/libz.so.1",     "/lib/x86_64-linux-gnu/libcrypto.so.3",
    "/lib/x86_64-linux-gnu/liblzma.so.5",  "/lib/x86_64-linux-gnu/libzstd.so.1",
    "/lib/x86_64-linux-gnu/libgmp.so.10",  NULL,
};

struct counts {
    unsigned long functions, insns, riprel, branches, declined, mismatches;
};

static ZydisDecoder zydis;

/* Compare one instruction; returns false to stop walking this function. */
static bool compare_one(const char *lib, const char *name, uint64_t addr, const uint8_t *code,
                        size_t avail, struct counts *c)
{
    mca_patcher_x86_insn_t ours;
    size_t len = mca_patcher_x86_64_decode(code, avail, &ours);
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
    if (!ZYAN_SUCCESS(ZydisDecoderDecodeFull(&zydis, code, avail, &zi, zops))) {
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

/* File offset and bytes available for a virtual address, from the PT_LOAD headers. */
static const uint8_t *code_at(const uint8_t *img, size_t size, uint64_t vaddr, size_t *avail)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *) img;
    const Elf64_Phdr *ph = (const Elf64_Phdr *) (img + eh->e_phoff);
    for (unsigned k = 0; k < eh->e_phnum; k++) {
        if (ph[k].p_type == PT_LOAD && vaddr >= ph[k].p_vaddr &&
            vaddr < ph[k].p_vaddr + ph[k].p_filesz) {
            uint64_t off = vaddr - ph[k].p_vaddr + ph[k].p_offset;
            uint64_t end = ph[k].p_offset + ph[k].p_filesz;
            if (off >= size || end > size) {
                return NULL;
            }
            *avail = end - off < WINDOW ? end - off : WINDOW;
            return img + off;
        }
    }
    return NULL;
}

static bool check_library(const char *path, struct counts *c)
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
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *) img;
    CHECK_MSG(memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64 &&
                  eh->e_machine == EM_X86_64,
              "%s is not an x86-64 ELF object", path);
    const Elf64_Shdr *sh = (const Elf64_Shdr *) (img + eh->e_shoff);
    struct counts before = *c;
    for (unsigned s = 0; s < eh->e_shnum; s++) {
        if (sh[s].sh_type != SHT_DYNSYM) {
            continue;
        }
        const Elf64_Sym *syms = (const Elf64_Sym *) (img + sh[s].sh_offset);
        const char *strtab = (const char *) img + sh[sh[s].sh_link].sh_offset;
        size_t n = sh[s].sh_size / sizeof(Elf64_Sym);
        uint64_t *seen = calloc(n, sizeof(*seen));
        size_t nseen = 0;
        for (size_t k = 0; k < n; k++) {
            const Elf64_Sym *sym = &syms[k];
            if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_shndx == SHN_UNDEF ||
                sym->st_value == 0) {
                continue;
            }
            /* Aliases share an entry: walk each address once. */
            bool dup = false;
            for (size_t d = 0; d < nseen && !dup; d++) {
                dup = seen[d] == sym->st_value;
            }
            if (dup) {
                continue;
            }
            seen[nseen++] = sym->st_value;
            size_t avail;
            const uint8_t *code = code_at(img, st.st_size, sym->st_value, &avail);
            if (!code) {
                continue;
            }
            c->functions++;
            size_t off = 0;
            while (off < avail &&
                   compare_one(path, strtab + sym->st_name, sym->st_value + off, code + off,
                               avail - off, c)) {
                mca_patcher_x86_insn_t insn;
                off += mca_patcher_x86_64_decode(code + off, avail - off, &insn);
            }
        }
        free(seen);
    }
    printf("%-45s functions %6lu  instructions %7lu  rip-relative %6lu  branches %6lu  "
           "declined %5lu  mismatches %lu\n",
           path, c->functions - before.functions, c->insns - before.insns,
           c->riprel - before.riprel, c->branches - before.branches,
           c->declined - before.declined, c->mismatches - before.mismatches);
    munmap((void *) img, st.st_size);
    return true;
}

int main(int argc, char **argv)
{
    ZydisDecoderInit(&zydis, ZYDIS_MACHINE_MODE_LONG_64, ZYDIS_STACK_WIDTH_64);
    struct counts c = {0};
    unsigned libs = 0;
    if (argc > 1) {
        for (int k = 1; k < argc; k++) {
            libs += check_library(argv[k], &c);
        }
    } else {
        for (const char **p = default_libs; *p; p++) {
            libs += check_library(*p, &c);
        }
    }
    if (libs == 0) {
        TEST_SKIP("none of the system libraries to check was found");
    }
    printf("total: %u libraries, %lu functions, %lu instructions (%lu rip-relative, %lu branches), "
           "%lu declined, %lu mismatches\n",
           libs, c.functions, c.insns, c.riprel, c.branches, c.declined, c.mismatches);
    CHECK_MSG(c.mismatches == 0, "%lu instructions decoded differently from Zydis", c.mismatches);
    /* The decoder must be useful, not just cautious: declines stay rare. */
    CHECK_MSG(c.declined * 20 < c.functions, "%lu of %lu functions declined", c.declined,
              c.functions);
    return test_finish("decode_oracle");
}
