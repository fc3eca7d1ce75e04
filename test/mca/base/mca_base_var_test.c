/*
 * MCA parameters: types, precedence of sources (command line > environment
 * > file > default), source tracking, and clear errors for bad values.
 */
#include "opal_config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "test/support/capture.h"
#include "test/support/test_util.h"

static char home[256];

static void write_param_file(const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/.opal-patcher", home);
    mkdir(path, 0700);
    snprintf(path, sizeof(path), "%s/.opal-patcher/mca-params.conf", home);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

typedef struct found_t {
    const char *name;
    mca_base_var_info_t info;
    bool found;
} found_t;

static void find_var(const mca_base_var_info_t *info, void *arg)
{
    found_t *f = arg;
    if (0 == strcmp(info->full_name, f->name)) {
        f->info = *info;
        f->found = true;
    }
}

static mca_base_var_source_t source_of(const char *name)
{
    found_t f = {.name = name};
    mca_base_var_foreach(find_var, &f);
    CHECK_MSG(f.found, "%s not registered", name);
    return f.info.source;
}

static int register_int(const char *name, int *storage, int def, int min, int max)
{
    *storage = def;
    mca_base_var_t var = {.framework = "test", .component = "comp", .name = name, .help = "a test int",
                          .type = MCA_BASE_VAR_TYPE_INT, .storage = storage, .min = min, .max = max};
    return mca_base_var_register(&var);
}

static void test_precedence(void)
{
    write_param_file("# comment\n\ntest_comp_a = 1\ntest_comp_b = 2 # trailing comment\ntest_comp_c=3\n");
    setenv("OMPI_MCA_test_comp_b", "20", 1);
    setenv("OMPI_MCA_test_comp_c", "30", 1);
    char *argv_store[] = {"prog", "--mca", "test_comp_c", "300", "keep", "-mca", "test_comp_d", "400", NULL};
    char **argv = argv_store;
    int argc = 8;
    CHECK(OPAL_SUCCESS == mca_base_var_init(&argc, &argv));
    CHECK(argc == 2 && 0 == strcmp(argv[1], "keep") && NULL == argv[2]);

    int a, b, c, d, e;
    CHECK(OPAL_SUCCESS == register_int("a", &a, -1, 0, 0));
    CHECK(OPAL_SUCCESS == register_int("b", &b, -1, 0, 0));
    CHECK(OPAL_SUCCESS == register_int("c", &c, -1, 0, 0));
    CHECK(OPAL_SUCCESS == register_int("d", &d, -1, 0, 0));
    CHECK(OPAL_SUCCESS == register_int("e", &e, -1, 0, 0));
    CHECK(1 == a && MCA_BASE_VAR_SOURCE_FILE == source_of("test_comp_a"));
    CHECK(20 == b && MCA_BASE_VAR_SOURCE_ENV == source_of("test_comp_b"));
    CHECK(300 == c && MCA_BASE_VAR_SOURCE_COMMAND_LINE == source_of("test_comp_c"));
    CHECK(400 == d && MCA_BASE_VAR_SOURCE_COMMAND_LINE == source_of("test_comp_d"));
    CHECK(-1 == e && MCA_BASE_VAR_SOURCE_DEFAULT == source_of("test_comp_e"));
    unsetenv("OMPI_MCA_test_comp_b");
    unsetenv("OMPI_MCA_test_comp_c");
    mca_base_var_finalize();
}

static void test_types(void)
{
    write_param_file("");
    CHECK(OPAL_SUCCESS == mca_base_var_init(NULL, NULL));
    setenv("OMPI_MCA_test_size_k", "64k", 1);
    setenv("OMPI_MCA_test_size_m", "16M", 1);
    setenv("OMPI_MCA_test_size_g", "1gb", 1);
    setenv("OMPI_MCA_test_bool_on", "yes", 1);
    setenv("OMPI_MCA_test_str_s", "hello", 1);
    size_t k = 0, m = 0, g = 0;
    bool on = false, off = true;
    char *s = NULL, *dflt = "default";
    mca_base_var_t vars[] = {
        {.framework = "test", .component = "size", .name = "k", .type = MCA_BASE_VAR_TYPE_SIZE, .storage = &k},
        {.framework = "test", .component = "size", .name = "m", .type = MCA_BASE_VAR_TYPE_SIZE, .storage = &m},
        {.framework = "test", .component = "size", .name = "g", .type = MCA_BASE_VAR_TYPE_SIZE, .storage = &g},
        {.framework = "test", .component = "bool", .name = "on", .type = MCA_BASE_VAR_TYPE_BOOL, .storage = &on},
        {.framework = "test", .component = "bool", .name = "off", .type = MCA_BASE_VAR_TYPE_BOOL, .storage = &off},
        {.framework = "test", .component = "str", .name = "s", .type = MCA_BASE_VAR_TYPE_STRING, .storage = &s},
        {.framework = "test", .component = "str", .name = "t", .type = MCA_BASE_VAR_TYPE_STRING, .storage = &dflt},
    };
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        CHECK(OPAL_SUCCESS == mca_base_var_register(&vars[i]));
    }
    CHECK(64 * 1024 == k);
    CHECK((size_t) 16 << 20 == m);
    CHECK((size_t) 1 << 30 == g);
    CHECK(on && off);
    CHECK(s && 0 == strcmp(s, "hello"));
    CHECK(dflt && 0 == strcmp(dflt, "default"));

    /* A synonym sets the parameter when its own name is not given. */
    setenv("OMPI_MCA_test_old_name", "7", 1);
    int syn = 0;
    mca_base_var_t with_synonym = {.framework = "test", .component = "new", .name = "name",
                                   .type = MCA_BASE_VAR_TYPE_INT, .storage = &syn,
                                   .synonym = "test_old_name"};
    CHECK(OPAL_SUCCESS == mca_base_var_register(&with_synonym));
    CHECK(7 == syn);
    unsetenv("OMPI_MCA_test_old_name");
    mca_base_var_finalize();
    CHECK(NULL == s); /* strings are released at finalize */
}

/* Each bad value fails, keeps the default, and the message names it all. */
static void expect_bad(const char *env_value, mca_base_var_type_t type, int min, int max,
                       const char *expected_words)
{
    setenv("OMPI_MCA_test_bad_value", env_value, 1);
    /* Storage outlives the registration (finalize puts the default back). */
    static union {
        int i;
        size_t z;
        bool b;
    } storage;
    storage.z = 0;
    mca_base_var_t var = {.framework = "test", .component = "bad", .name = "value", .type = type,
                          .storage = &storage, .min = min, .max = max};
    test_capture_t cap;
    test_capture_begin(&cap);
    int rc = mca_base_var_register(&var);
    const char *msg = test_capture_end(&cap);
    CHECK_MSG(OPAL_ERR_BAD_PARAM == rc, "value '%s' accepted", env_value);
    CHECK_MSG(strstr(msg, "test_bad_value") && strstr(msg, env_value) && strstr(msg, expected_words),
              "message for '%s' was: %s", env_value, msg);
    CHECK(0 == storage.i);
    unsetenv("OMPI_MCA_test_bad_value");
}

static void test_bad_values(void)
{
    write_param_file("");
    CHECK(OPAL_SUCCESS == mca_base_var_init(NULL, NULL));
    expect_bad("abc", MCA_BASE_VAR_TYPE_INT, 0, 0, "integer");
    expect_bad("12x", MCA_BASE_VAR_TYPE_INT, 0, 0, "integer");
    expect_bad("101", MCA_BASE_VAR_TYPE_INT, 0, 100, "from 0 to 100");
    expect_bad("maybe", MCA_BASE_VAR_TYPE_BOOL, 0, 0, "boolean");
    expect_bad("-1", MCA_BASE_VAR_TYPE_SIZE, 0, 0, "size");
    expect_bad("10q", MCA_BASE_VAR_TYPE_SIZE, 0, 0, "size");
    expect_bad("99999999999g", MCA_BASE_VAR_TYPE_SIZE, 0, 0, "size");
    mca_base_var_finalize();
}

static void test_bad_file_and_argv(void)
{
    test_capture_t cap;
    write_param_file("test_comp_a = 1\nthis line has no equals sign\n");
    test_capture_begin(&cap);
    int rc = mca_base_var_init(NULL, NULL);
    const char *msg = test_capture_end(&cap);
    CHECK(OPAL_ERR_BAD_PARAM == rc);
    CHECK_MSG(strstr(msg, "mca-params.conf") && strstr(msg, "line 2"), "message was: %s", msg);

    write_param_file("");
    char *argv_store[] = {"prog", "x", "--mca", "test_comp_a", NULL};
    char **argv = argv_store;
    int argc = 4;
    test_capture_begin(&cap);
    rc = mca_base_var_init(&argc, &argv);
    msg = test_capture_end(&cap);
    CHECK(OPAL_ERR_BAD_PARAM == rc);
    CHECK(4 == argc && 0 == strcmp(argv[2], "--mca")); /* argv untouched on error */
    CHECK_MSG(strstr(msg, "--mca") && strstr(msg, "missing value"), "message was: %s", msg);

    /* Nothing half initialised: a correct init afterwards works. */
    CHECK(OPAL_SUCCESS == mca_base_var_init(NULL, NULL));
    int a;
    CHECK(OPAL_SUCCESS == register_int("a", &a, 5, 0, 0) && 5 == a);
    mca_base_var_finalize();
}

int main(void)
{
    snprintf(home, sizeof(home), "/tmp/opal-var-test-%d", (int) getpid());
    mkdir(home, 0700);
    setenv("HOME", home, 1);
    test_precedence();
    test_types();
    test_bad_values();
    test_bad_file_and_argv();
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", home);
    CHECK(0 == system(cmd));
    return test_finish("mca_base_var_test");
}
