/*
 * A memory component "opatch" that needs a symbol no libopen-pal has,
 * linked like ours (immediate binding): Open MPI must fail to load it,
 * say so, and go on without it (test/ompi/bad_path.sh).
 */
#include "opal_config.h"

#include "opal/mca/memory/base/empty.h"
#include "opal/mca/memory/memory.h"

extern int opal_symbol_of_another_release(int *priority);

opal_memory_base_component_2_0_0_t mca_memory_opatch_component = {
    .memoryc_version = {
        OPAL_MEMORY_BASE_VERSION_2_0_0,
        .mca_component_name = "opatch",
        MCA_BASE_MAKE_VERSION(component, 0, 0, 0),
    },
    .memoryc_query = opal_symbol_of_another_release,
    .memoryc_register = opal_memory_base_component_register_empty,
    .memoryc_deregister = opal_memory_base_component_deregister_empty,
    .memoryc_set_alignment = opal_memory_base_component_set_alignment_empty,
};
