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
    p += 5;
    for (int field = 0; field < 2; field++) { /* skip offset and dev */
        while (*p == ' ') {
            p++;
        }
        while (*p && *p != ' ') {
            p++;
        }
    }
    entry->inode = strtoul(p, &p, 10);
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

typedef struct vmflag_arg_t {
    uintptr_t addr;
    const char *flag;
    bool in_mapping; /* the lines since the last header are addr's mapping's */
    bool found;
} vmflag_arg_t;

/* smaps: a maps line heads each mapping, its "VmFlags: rd ex mr ..." line comes last. */
static bool vmflag_line(const char *line, void *arg)
{
    vmflag_arg_t *v = arg;
    opal_proc_maps_entry_t entry;
    if (parse_line(line, &entry)) {
        if (entry.start > v->addr) {
            return false; /* past it: no mapping holds addr */
        }
        v->in_mapping = v->addr < entry.end;
        return true;
    }
    if (!v->in_mapping || 0 != strncmp(line, "VmFlags:", 8)) {
        return true;
    }
    for (const char *p = line + 8; *p;) {
        while (*p == ' ') {
            p++;
        }
        size_t len = strcspn(p, " ");
        v->found |= len == strlen(v->flag) && 0 == strncmp(p, v->flag, len);
        p += len;
    }
    return false; /* the mapping's last line */
}

bool opal_proc_maps_vmflag(const char *smaps_path, uintptr_t addr, const char *flag)
{
    vmflag_arg_t v = {addr, flag, false, false};
    return OPAL_SUCCESS ==
               foreach_line(smaps_path ? smaps_path : "/proc/self/smaps", vmflag_line, &v) &&
           v.found;
}
