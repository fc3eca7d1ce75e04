/*
 * The registration cache framework: keep memory registrations (pinned,
 * device-translated ranges) alive after their last use ("leave pinned"),
 * hand them out again for the same range, and drop them when the pages
 * behind them are released (memory release hooks).
 *
 * A module is created per user (a device, a ring, a protection domain)
 * with mca_rcache_base_module_create(); the user supplies register_mem and
 * deregister_mem in mca_rcache_base_resources_t.
 */
#ifndef OPAL_MCA_RCACHE_RCACHE_H
#define OPAL_MCA_RCACHE_RCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/class/opal_list.h"
#include "opal/mca/mca.h"

#define MCA_RCACHE_BASE_VERSION 1

enum {
    MCA_RCACHE_FLAGS_CACHE_BYPASS = 0x0001, /* never cached: deregistered at the last release */
    MCA_RCACHE_FLAGS_PERSIST = 0x0002,      /* never evicted by the cache; still invalidated;
                                               kept unused only with leave_pinned, as any other */
    MCA_RCACHE_FLAGS_INVALID = 0x0080,      /* pages released: never handed out again */
};

enum {
    MCA_RCACHE_ACCESS_LOCAL_WRITE = 0x01,
    MCA_RCACHE_ACCESS_REMOTE_READ = 0x02,
    MCA_RCACHE_ACCESS_REMOTE_WRITE = 0x04,
    MCA_RCACHE_ACCESS_ANY = 0x0f,
};

struct mca_rcache_base_module_t;
struct opal_mem_source_t;

typedef struct mca_rcache_base_registration_t {
    struct mca_rcache_base_module_t *rcache;
    unsigned char *base;       /* first byte, page aligned */
    unsigned char *bound;      /* LAST byte (inclusive) */
    unsigned char *alloc_base;
    /*
     * The count and the state change together: the rcache updates them with
     * one atomic operation on reg_state (read them, never write them).
     */
    union {
        struct {
            volatile int32_t ref_count;
            volatile uint32_t flags;
        };
        uint64_t reg_state;
    };
    int32_t access_flags;
    /*
     * Internal to the rcache: with them the struct is one 64-byte cache
     * line, all that a hit, a release event and a deregistration touch.
     */
    uint32_t reg_fork_gen;                /* process generation that made the pins */
    struct mca_rcache_base_registration_t *reg_next; /* the module's chains and stacks */
    uint64_t *reg_frames;                 /* page frames recorded by the sanitizer, or NULL */
} mca_rcache_base_registration_t;

typedef struct mca_rcache_base_resources_t {
    char *cache_name;
    void *reg_data;
    size_t sizeof_reg; /* size of the caller's struct that begins with the registration */
    int (*register_mem)(void *reg_data, void *base, size_t size,
                        mca_rcache_base_registration_t *reg);
    int (*deregister_mem)(void *reg_data, mca_rcache_base_registration_t *reg);
} mca_rcache_base_resources_t;

typedef struct mca_rcache_base_module_t mca_rcache_base_module_t;

/*
 * Register [addr, addr+size): a registration with a reference taken.  A
 * range past the end of the address space is OPAL_ERR_BAD_PARAM (so is
 * one for invalidate_range).
 */
typedef int (*mca_rcache_base_module_register_fn_t)(mca_rcache_base_module_t *rcache, void *addr,
                                                    size_t size, uint32_t flags,
                                                    int32_t access_flags,
                                                    mca_rcache_base_registration_t **reg);
/*
 * A valid cached registration covering [addr, addr+size), with a reference
 * taken (drop it with rcache_deregister); OPAL_ERR_NOT_FOUND and *reg NULL
 * when there is none.
 */
typedef int (*mca_rcache_base_module_find_fn_t)(mca_rcache_base_module_t *rcache, void *addr,
                                                size_t size, mca_rcache_base_registration_t **reg);
typedef int (*mca_rcache_base_module_deregister_fn_t)(mca_rcache_base_module_t *rcache,
                                                      mca_rcache_base_registration_t *reg);
typedef int (*mca_rcache_base_module_invalidate_range_fn_t)(mca_rcache_base_module_t *rcache,
                                                            void *addr, size_t size);

/* Internal, called by the base only: */
/* A release event; runs inside munmap/free: must not allocate, free or block. */
typedef void (*mca_rcache_base_module_release_fn_t)(mca_rcache_base_module_t *rcache, void *addr,
                                                    size_t size, bool from_alloc);
typedef enum {
    MCA_RCACHE_ATFORK_PREPARE,
    MCA_RCACHE_ATFORK_PARENT,
    MCA_RCACHE_ATFORK_CHILD,
} mca_rcache_base_atfork_phase_t;
typedef void (*mca_rcache_base_module_atfork_fn_t)(mca_rcache_base_module_t *rcache,
                                                   mca_rcache_base_atfork_phase_t phase);
/* Deregister everything and free the module. */
typedef void (*mca_rcache_base_module_finalize_fn_t)(mca_rcache_base_module_t *rcache);

struct mca_rcache_base_module_t {
    mca_base_module_t super;
    mca_rcache_base_module_register_fn_t rcache_register;
    mca_rcache_base_module_find_fn_t rcache_find;
    mca_rcache_base_module_deregister_fn_t rcache_deregister;
    mca_rcache_base_module_invalidate_range_fn_t rcache_invalidate_range;
    mca_rcache_base_module_release_fn_t rcache_release;
    mca_rcache_base_module_atfork_fn_t rcache_atfork;
    mca_rcache_base_module_finalize_fn_t rcache_finalize;
    /* Owned by the base: */
    opal_list_item_t rcache_live;  /* in the base's list of live modules */
    bool rcache_hooked;            /* holds a reference on the release callback */
    /*
     * The userfaultfd source (rcache_base_uffd on or strict), or NULL: the
     * module subscribes each new registration's range and drains it at the
     * start of every lookup; strict also confirms each hit's page frames.
     */
    const struct opal_mem_source_t *rcache_uffd;
    bool rcache_uffd_strict;
};

/*
 * A component creates modules.  Its query only says whether it can work
 * here and at which priority (it returns a static placeholder module);
 * rcache_create makes one module per mca_rcache_base_module_create call.
 */
typedef mca_rcache_base_module_t *(*mca_rcache_base_component_create_fn_t)(
    void *user_data, const mca_rcache_base_resources_t *resources, bool leave_pinned);

typedef struct mca_rcache_base_component_t {
    mca_base_component_t rcache_version;
    mca_rcache_base_component_create_fn_t rcache_create;
} mca_rcache_base_component_t;

#endif
