/*
 * One thread calls the API (opal_mem_hooks_support_level, whose check
 * brings the patched copies of libc in line with the loaded ones) in a
 * tight loop while another makes and closes dlmopen namespaces.  The
 * check must never read a copy that a dlclose is unmapping (it did, and
 * died of SIGSEGV with the overwrite component in 2 runs of 3), and
 * afterwards a namespace kept open all along and a new one both report
 * the munmap of their library.  With each component, in a child.
 */
#include "opal_config.h"

#include <pthread.h>

#include "opal/constants.h"
#include "opal/runtime/opal.h"
#include "test/memoryhooks/ns_support.h"
#include "test/support/emulated.h"

#define ROUNDS 300

static volatile int churn_done;
static int churn_failures;

static void *churn(void *arg)
{
    const int rounds = *(const int *) arg;
    for (int r = 0; r < rounds; r++) {
        void *handle = dlmopen(LM_ID_NEWLM, ns_path, RTLD_NOW);
        if (NULL == handle) {
            churn_failures++;
            continue;
        }
        dlclose(handle);
    }
    __atomic_store_n(&churn_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int check(const char *component)
{
    alarm(120); /* a deadlock ends as SIGALRM */
    if (OPAL_SUCCESS != opal_init_util(NULL, NULL)) {
        return 2;
    }
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(on_release, NULL)) {
        printf("note: %s: memory hooks cannot be installed here\n", component);
        return NS_CHILD_SKIP;
    }
    void *stay = dlmopen(LM_ID_NEWLM, ns_path, RTLD_NOW);
    CHECK_MSG(NULL != stay, "%s: dlmopen %s: %s", component, ns_path, dlerror());
    if (NULL == stay) {
        return 1;
    }
    int rounds = test_rounds(ROUNDS);
    pthread_t thread;
    CHECK(0 == pthread_create(&thread, NULL, churn, &rounds));
    unsigned long calls = 0;
    while (!__atomic_load_n(&churn_done, __ATOMIC_ACQUIRE)) {
        (void) opal_mem_hooks_support_level();
        calls++;
    }
    pthread_join(thread, NULL);
    CHECK_MSG(0 == churn_failures, "%s: %d dlmopen calls failed", component, churn_failures);
    CHECK_MSG(0 != opal_mem_hooks_support_level(), "%s: support level 0 after the churn",
              component);

    ns_munmap_reports(stay, component, "namespace open all along");
    void *fresh = dlmopen(LM_ID_NEWLM, ns_path, RTLD_NOW);
    CHECK_MSG(NULL != fresh, "%s: dlmopen %s: %s", component, ns_path, dlerror());
    if (NULL != fresh) {
        ns_munmap_reports(fresh, component, "namespace made after the churn");
        dlclose(fresh);
    }
    dlclose(stay);
    printf("%s: %d namespaces made and closed beside %lu checks\n", component, rounds, calls);
    opal_mem_hooks_unregister_release(on_release);
    opal_finalize_util();
    return test_failures ? 1 : 0;
}

int main(void)
{
    /* One copy variant per namespace patched at once (memory_variants.h). */
    if (OPAL_MEM_HOOKS_NUM_VARIANTS < 4) {
        TEST_SKIP("a build with %d variants (--with-mem-hooks-variants) cannot patch the libc "
                  "of the 2 namespaces this test has at once",
                  OPAL_MEM_HOOKS_NUM_VARIANTS);
    }
    test_skip_if_signals_break_tls();
    ns_set_path();
    if (0 == ns_for_each_component(check, "(SIGSEGV: the check read a copy of libc being "
                                          "unmapped; SIGALRM: it hung)")) {
        TEST_SKIP("no patcher component can set the memory hooks up here");
    }
    return test_finish("ns_churn_test");
}
