/*
 * Looking up one mapping in /proc/self/maps without allocating (read(2)
 * into a stack buffer): usable from a hook inside the allocator.
 */
#ifndef OPAL_UTIL_PROC_MAPS_H
#define OPAL_UTIL_PROC_MAPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct opal_proc_maps_entry_t {
    uintptr_t start, end;
    int prot;                  /* PROT_* bits */
    uint64_t offset;           /* into the file (a SysV segment's mapping: into the segment) */
    unsigned int dev_major;    /* the file's device, as stat's major() and minor() of */
    unsigned int dev_minor;    /*   st_dev give it (0:0 for an anonymous mapping) */
    uint64_t inode;            /* for a SysV shared memory mapping: its shmid */
    char path_start[16];       /* the first characters of the path column */
} opal_proc_maps_entry_t;

/* Call fn for each mapping, in address order, until it returns false. */
int opal_proc_maps_foreach(bool (*fn)(const opal_proc_maps_entry_t *entry, void *arg), void *arg);

/* The mapping that holds addr: OPAL_SUCCESS, OPAL_ERR_NOT_FOUND, or OPAL_ERR_NOT_AVAILABLE. */
int opal_proc_maps_find(uintptr_t addr, opal_proc_maps_entry_t *entry);

/*
 * Whether the mapping that holds addr carries the two-letter flag in its
 * "VmFlags:" line of smaps (the file at smaps_path, NULL for
 * /proc/self/smaps), e.g. "bt" for an arm64 page guarded by BTI, which
 * /proc/self/maps does not show.  False when it does not or cannot be
 * told.  The kernel computes each mapping's sizes as smaps is read (a walk
 * of its pages): the read stops at addr's mapping, but costs more than a
 * maps lookup.
 */
bool opal_proc_maps_vmflag(const char *smaps_path, uintptr_t addr, const char *flag);

/*
 * The page size the kernel maps the mapping that holds addr with
 * ("KernelPageSize:" in smaps: a hugetlb mapping's huge page; transparent
 * huge pages do not change it), or 0 when it cannot be told.  As costly as
 * opal_proc_maps_vmflag.
 */
size_t opal_proc_maps_page_size(const char *smaps_path, uintptr_t addr);

#endif
