#include "opal_config.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/constants.h"
#include "opal/util/proc_maps.h"

/* "start-end perms offset dev inode   path" */
static bool parse_line(const char *line, opal_proc_maps_entry_t *entry)
{
    char *p;
    entry->start = strtoul(line, &p, 16);
    if (*p != '-') {
        return false;
    }
    entry->end = strtoul(p + 1, &p, 16);
    if (*p != ' ') {
        return false;
    }
    entry->prot = (p[1] == 'r' ? PROT_READ : 0) | (p[2] == 'w' ? PROT_WRITE : 0) |
                  (p[3] == 'x' ? PROT_EXEC : 0);
    /* 64-bit fields also on a 32-bit target: file offsets and inode numbers may not fit a long. */
    entry->offset = strtoull(p + 5, &p, 16);
    entry->dev_major = (unsigned int) strtoul(p, &p, 16);
    entry->dev_minor = (unsigned int) (*p == ':' ? strtoul(p + 1, &p, 16) : 0);
    entry->inode = strtoull(p, &p, 10);
    while (*p == ' ') {
        p++;
    }
    size_t i = 0;
    for (; i < sizeof(entry->path_start) - 1 && p[i]; i++) {
        entry->path_start[i] = p[i];
    }
    entry->path_start[i] = '\0';
    return true;
}

/* Call fn for each line of the file at path (cut at 511 bytes) until it returns false. */
static int foreach_line(const char *path, bool (*fn)(const char *line, void *arg), void *arg)
{
    /* read(2) into a stack buffer: no stdio, no allocation. */
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return OPAL_ERR_NOT_AVAILABLE;
    }
    char buf[4096], line[512];
    size_t line_len = 0;
    ssize_t n;
    bool more = true;
    while (more && (n = read(fd, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < n && more; i++) {
            if (buf[i] != '\n') {
                if (line_len < sizeof(line) - 1) {
                    line[line_len++] = buf[i];
                }
                continue;
            }
            line[line_len] = '\0';
            line_len = 0;
            more = fn(line, arg);
        }
    }
    close(fd);
    return OPAL_SUCCESS;
}

typedef struct foreach_arg_t {
    bool (*fn)(const opal_proc_maps_entry_t *entry, void *arg);
    void *arg;
} foreach_arg_t;

static bool entry_line(const char *line, void *arg)
{
    foreach_arg_t *each = arg;
    opal_proc_maps_entry_t entry;
    return !parse_line(line, &entry) || each->fn(&entry, each->arg);
}

int opal_proc_maps_foreach(bool (*fn)(const opal_proc_maps_entry_t *entry, void *arg), void *arg)
{
    foreach_arg_t each = {fn, arg};
    return foreach_line("/proc/self/maps", entry_line, &each);
}

typedef struct find_arg_t {
    uintptr_t addr;
    opal_proc_maps_entry_t *entry;
    bool found;
} find_arg_t;

static bool find_one(const opal_proc_maps_entry_t *entry, void *arg)
{
    find_arg_t *find = arg;
    if (find->addr >= entry->start && find->addr < entry->end) {
        *find->entry = *entry;
        find->found = true;
    }
    return !find->found && entry->start <= find->addr;
}

int opal_proc_maps_find(uintptr_t addr, opal_proc_maps_entry_t *entry)
{
    find_arg_t find = {addr, entry, false};
    int rc = opal_proc_maps_foreach(find_one, &find);
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    return find.found ? OPAL_SUCCESS : OPAL_ERR_NOT_FOUND;
}

/* The line of smaps that begins with field, for the mapping that holds addr. */
typedef struct smaps_find_t {
    uintptr_t addr;
    const char *field;
    bool in_mapping; /* the lines since the last header are addr's mapping's */
    bool found;
    char value[192]; /* the rest of that line (VmFlags has some 30 two-letter flags) */
} smaps_find_t;

/* smaps: a maps line heads each mapping, its "Name: value" lines follow, "VmFlags:" last. */
static bool smaps_line(const char *line, void *arg)
{
    smaps_find_t *find = arg;
    opal_proc_maps_entry_t entry;
    if (parse_line(line, &entry)) {
        if (entry.start > find->addr) {
            return false; /* past it: no mapping holds addr */
        }
        find->in_mapping = find->addr < entry.end;
        return true;
    }
    if (!find->in_mapping) {
        return true;
    }
    const size_t len = strlen(find->field);
    if (0 == strncmp(line, find->field, len)) {
        strncpy(find->value, line + len, sizeof(find->value) - 1);
        find->found = true;
        return false;
    }
    return 0 != strncmp(line, "VmFlags:", 8); /* the mapping's last line */
}

static bool smaps_find(const char *smaps_path, smaps_find_t *find)
{
    return OPAL_SUCCESS ==
               foreach_line(smaps_path ? smaps_path : "/proc/self/smaps", smaps_line, find) &&
           find->found;
}

bool opal_proc_maps_vmflag(const char *smaps_path, uintptr_t addr, const char *flag)
{
    smaps_find_t find = {.addr = addr, .field = "VmFlags:"};
    if (!smaps_find(smaps_path, &find)) {
        return false;
    }
    for (const char *p = find.value; *p;) {
        while (*p == ' ') {
            p++;
        }
        size_t len = strcspn(p, " ");
        if (len == strlen(flag) && 0 == strncmp(p, flag, len)) {
            return true;
        }
        p += len;
    }
    return false;
}

size_t opal_proc_maps_page_size(const char *smaps_path, uintptr_t addr)
{
    smaps_find_t find = {.addr = addr, .field = "KernelPageSize:"};
    return smaps_find(smaps_path, &find) ? (size_t) strtoul(find.value, NULL, 10) << 10 : 0;
}
