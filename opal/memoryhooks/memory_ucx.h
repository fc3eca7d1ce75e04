/*
 * UCX's memory events as the source of ours: with the claim "ucx" (see
 * mca_patcher_base_claim) we register a handler with UCX's libucm and
 * patch nothing ourselves.
 */
#ifndef OPAL_MEMORYHOOKS_MEMORY_UCX_H
#define OPAL_MEMORYHOOKS_MEMORY_UCX_H

/*
 * Start receiving UCX's UCM_EVENT_VM_UNMAPPED events.  OPAL_ERR_NOT_SUPPORTED
 * with *reason set when libucm cannot be found or refuses the handler.
 */
int opal_mem_hooks_ucx_start(const char **reason);
/* Stop: when it returns our handler is no longer called. */
void opal_mem_hooks_ucx_stop(void);

#endif
