#include "opal_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var_store.h"
#include "opal/util/output.h"

static mca_base_var_setting_t *settings;
static size_t num_settings, max_settings;

static int add_setting(mca_base_var_source_t source, const char *name, size_t name_len,
                       const char *value, const char *origin)
{
    if (num_settings == max_settings) {
        size_t n = max_settings ? 2 * max_settings : 16;
        mca_base_var_setting_t *grown = realloc(settings, n * sizeof(*settings));
        if (NULL == grown) {
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        settings = grown;
        max_settings = n;
    }
    mca_base_var_setting_t *s = &settings[num_settings];
    s->name = strndup(name, name_len);
    s->value = strdup(value);
    s->origin = strdup(origin);
    s->source = source;
    if (!s->name || !s->value || !s->origin) {
        free(s->name);
        free(s->value);
        free(s->origin);
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    num_settings++;
    return OPAL_SUCCESS;
}

const mca_base_var_setting_t *mca_base_var_store_find(mca_base_var_source_t source, const char *name)
{
    /* Newest first: a later line (or the user's file) overrides. */
    for (size_t i = num_settings; i-- > 0;) {
        if (settings[i].source == source && 0 == strcmp(settings[i].name, name)) {
            return &settings[i];
        }
    }
    return NULL;
}

static char *trim(char *s)
{
    while (isspace((unsigned char) *s)) {
        s++;
    }
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char) end[-1])) {
        *--end = '\0';
    }
    return s;
}

static bool valid_name(const char *name, size_t len)
{
    if (0 == len) {
        return false;
    }
    for (size_t i = 0; i < len; i++) {
        if (!isalnum((unsigned char) name[i]) && name[i] != '_') {
            return false;
        }
    }
    return true;
}

/* Lines are "name = value"; '#' starts a comment; blank lines are fine. */
static int load_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (NULL == f) {
        return OPAL_SUCCESS; /* a missing file is not an error */
    }
    char line[4096];
    int lineno = 0, rc = OPAL_SUCCESS;
    while (OPAL_SUCCESS == rc && fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) {
            *hash = '\0';
        }
        char *text = trim(line);
        if ('\0' == *text) {
            continue;
        }
        char *eq = strchr(text, '=');
        char *name = text;
        size_t name_len = eq ? (size_t) (eq - text) : 0;
        while (name_len && isspace((unsigned char) name[name_len - 1])) {
            name_len--;
        }
        if (NULL == eq || !valid_name(name, name_len)) {
            opal_output("malformed line %d in MCA parameter file %s: '%s' (expected 'name = value')",
                        lineno, path, text);
            rc = OPAL_ERR_BAD_PARAM;
            break;
        }
        char origin[4096 + 16];
        snprintf(origin, sizeof(origin), "%s:%d", path, lineno);
        rc = add_setting(MCA_BASE_VAR_SOURCE_FILE, name, name_len, trim(eq + 1), origin);
    }
    fclose(f);
    return rc;
}

int mca_base_var_store_load_files(void)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/opal-patcher-mca-params.conf", OPAL_SYSCONFDIR);
    int rc = load_file(path);
    const char *home = getenv("HOME");
    if (OPAL_SUCCESS == rc && home) {
        snprintf(path, sizeof(path), "%s/.opal-patcher/mca-params.conf", home);
        rc = load_file(path);
    }
    return rc;
}

static bool is_mca_flag(const char *arg)
{
    return 0 == strcmp(arg, "--mca") || 0 == strcmp(arg, "-mca");
}

int mca_base_var_store_take_argv(int *argc, char **argv)
{
    /* Validate and record every pair first, so that on error argv is untouched. */
    for (int i = 1; i < *argc; i++) {
        if (!is_mca_flag(argv[i])) {
            continue;
        }
        if (i + 2 >= *argc) {
            opal_output("%s %s: missing %s (usage: --mca <name> <value>)", argv[i],
                        i + 1 < *argc ? argv[i + 1] : "", i + 1 < *argc ? "value" : "name and value");
            return OPAL_ERR_BAD_PARAM;
        }
        const char *name = argv[i + 1];
        if (!valid_name(name, strlen(name))) {
            opal_output("--mca %s: '%s' is not a parameter name (letters, digits, '_')", name, name);
            return OPAL_ERR_BAD_PARAM;
        }
        int rc = add_setting(MCA_BASE_VAR_SOURCE_COMMAND_LINE, name, strlen(name), argv[i + 2], "--mca");
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
        i += 2;
    }
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (is_mca_flag(argv[i])) {
            i += 2;
        } else {
            argv[out++] = argv[i];
        }
    }
    *argc = out;
    argv[out] = NULL;
    return OPAL_SUCCESS;
}

void mca_base_var_store_clear(void)
{
    for (size_t i = 0; i < num_settings; i++) {
        free(settings[i].name);
        free(settings[i].value);
        free(settings[i].origin);
    }
    free(settings);
    settings = NULL;
    num_settings = max_settings = 0;
}
