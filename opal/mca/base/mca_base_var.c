/*
 * MCA parameters: registration, parsing and the precedence of sources.
 * Nothing here runs on a hook path; it may allocate.
 */
#include "opal_config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/mca/base/mca_base_var_store.h"
#include "opal/util/output.h"

/* The copy inside an Open MPI component (ompi/) reads its own prefix:
 * OMPI_MCA_patcher & co. there belong to Open MPI's frameworks. */
#ifndef MCA_BASE_ENV_PREFIX
#define MCA_BASE_ENV_PREFIX "OMPI_MCA_"
#endif

typedef struct mca_base_var_record_t {
    mca_base_var_t var;
    char *full_name;
    char *value;            /* formatted current value */
    mca_base_var_source_t source;
    const char *source_detail;
    /* The storage's content at registration: put back on release, so that
     * the next registration (after a finalize) starts from the default. */
    union {
        int i;
        bool b;
        size_t z;
        char *s;
    } default_value;
} mca_base_var_record_t;

static mca_base_var_record_t *records;
static size_t num_records, max_records;

static char *join_name(const mca_base_var_t *var)
{
    const char *parts[3] = {var->framework, var->component, var->name};
    size_t len = 1;
    for (int i = 0; i < 3; i++) {
        len += parts[i] ? strlen(parts[i]) + 1 : 0;
    }
    char *name = malloc(len);
    if (NULL == name) {
        return NULL;
    }
    name[0] = '\0';
    for (int i = 0; i < 3; i++) {
        if (parts[i]) {
            if (name[0]) {
                strcat(name, "_");
            }
            strcat(name, parts[i]);
        }
    }
    return name;
}

const char *mca_base_var_source_name(mca_base_var_source_t source)
{
    switch (source) {
    case MCA_BASE_VAR_SOURCE_FILE: return "file";
    case MCA_BASE_VAR_SOURCE_ENV: return "environment";
    case MCA_BASE_VAR_SOURCE_COMMAND_LINE: return "command line";
    default: return "default";
    }
}

const char *mca_base_var_lookup(const char *full_name, mca_base_var_source_t *source,
                                const char **source_detail)
{
    const mca_base_var_setting_t *setting = mca_base_var_store_find(MCA_BASE_VAR_SOURCE_COMMAND_LINE,
                                                                    full_name);
    if (setting) {
        *source = MCA_BASE_VAR_SOURCE_COMMAND_LINE;
        *source_detail = setting->origin;
        return setting->value;
    }
    char env_name[256];
    snprintf(env_name, sizeof(env_name), MCA_BASE_ENV_PREFIX "%s", full_name);
    const char *env = getenv(env_name);
    if (env) {
        *source = MCA_BASE_VAR_SOURCE_ENV;
        *source_detail = "environment";
        return env;
    }
    setting = mca_base_var_store_find(MCA_BASE_VAR_SOURCE_FILE, full_name);
    if (setting) {
        *source = MCA_BASE_VAR_SOURCE_FILE;
        *source_detail = setting->origin;
        return setting->value;
    }
    return NULL;
}

static int parse_int(const char *text, const mca_base_var_t *var, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 0);
    if (errno || end == text || *end != '\0' || v < INT_MIN || v > INT_MAX) {
        return OPAL_ERR_BAD_PARAM;
    }
    if (var->min < var->max && (v < var->min || v > var->max)) {
        return OPAL_ERR_BAD_PARAM;
    }
    *out = (int) v;
    return OPAL_SUCCESS;
}

static int parse_bool(const char *text, bool *out)
{
    static const char *const yes[] = {"1", "true", "yes", "on", "enabled", NULL};
    static const char *const no[] = {"0", "false", "no", "off", "disabled", NULL};
    for (int i = 0; yes[i]; i++) {
        if (0 == strcasecmp(text, yes[i])) {
            *out = true;
            return OPAL_SUCCESS;
        }
        if (0 == strcasecmp(text, no[i])) {
            *out = false;
            return OPAL_SUCCESS;
        }
    }
    return OPAL_ERR_BAD_PARAM;
}

static int parse_size(const char *text, size_t *out)
{
    char *end;
    if (!isdigit((unsigned char) text[0])) {
        return OPAL_ERR_BAD_PARAM; /* strtoull would accept "-1" */
    }
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno || end == text) {
        return OPAL_ERR_BAD_PARAM;
    }
    unsigned shift = 0;
    switch (tolower((unsigned char) *end)) {
    case 'k': shift = 10; end++; break;
    case 'm': shift = 20; end++; break;
    case 'g': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'b' || *end == 'B')) {
        end++;
    }
    if (*end != '\0' || (shift && v > (SIZE_MAX >> shift))) {
        return OPAL_ERR_BAD_PARAM;
    }
    *out = (size_t) (v << shift);
    return OPAL_SUCCESS;
}

static const char *expected_text(const mca_base_var_t *var, char *buf, size_t len)
{
    switch (var->type) {
    case MCA_BASE_VAR_TYPE_INT:
        if (var->min < var->max) {
            snprintf(buf, len, "an integer from %d to %d", var->min, var->max);
        } else {
            snprintf(buf, len, "an integer");
        }
        return buf;
    case MCA_BASE_VAR_TYPE_BOOL: return "a boolean (1/0, true/false, yes/no, on/off)";
    case MCA_BASE_VAR_TYPE_SIZE: return "a size in bytes, optionally with k, m or g (e.g. 64k, 16m, 1g)";
    default: return "a string";
    }
}

/* Parse text into the var's storage (and the record's formatted value). */
static int apply_value(mca_base_var_record_t *rec, const char *text)
{
    const mca_base_var_t *var = &rec->var;
    int rc = OPAL_SUCCESS;

    switch (var->type) {
    case MCA_BASE_VAR_TYPE_INT: {
        int v;
        rc = parse_int(text, var, &v);
        if (OPAL_SUCCESS == rc) {
            *(int *) var->storage = v;
        }
        break;
    }
    case MCA_BASE_VAR_TYPE_BOOL: {
        bool v;
        rc = parse_bool(text, &v);
        if (OPAL_SUCCESS == rc) {
            *(bool *) var->storage = v;
        }
        break;
    }
    case MCA_BASE_VAR_TYPE_SIZE: {
        size_t v;
        rc = parse_size(text, &v);
        if (OPAL_SUCCESS == rc) {
            *(size_t *) var->storage = v;
        }
        break;
    }
    case MCA_BASE_VAR_TYPE_STRING: {
        char *copy = strdup(text);
        if (NULL == copy) {
            return OPAL_ERR_OUT_OF_RESOURCE;
        }
        *(char **) var->storage = copy;
        break;
    }
    }
    if (OPAL_SUCCESS != rc) {
        return rc;
    }
    free(rec->value);
    rec->value = strdup(text);
    return rec->value ? OPAL_SUCCESS : OPAL_ERR_OUT_OF_RESOURCE;
}

static char *format_default(const mca_base_var_t *var)
{
    char buf[64];
    switch (var->type) {
    case MCA_BASE_VAR_TYPE_INT: snprintf(buf, sizeof(buf), "%d", *(int *) var->storage); break;
    case MCA_BASE_VAR_TYPE_BOOL: snprintf(buf, sizeof(buf), "%s", *(bool *) var->storage ? "true" : "false"); break;
    case MCA_BASE_VAR_TYPE_SIZE: snprintf(buf, sizeof(buf), "%zu", *(size_t *) var->storage); break;
    case MCA_BASE_VAR_TYPE_STRING: {
        const char *s = *(char **) var->storage;
        return strdup(s ? s : "");
    }
    }
    return strdup(buf);
}

static mca_base_var_record_t *find_record(const char *full_name)
{
    for (size_t i = 0; i < num_records; i++) {
        if (0 == strcmp(records[i].full_name, full_name)) {
            return &records[i];
        }
    }
    return NULL;
}

static void save_default(mca_base_var_record_t *rec)
{
    void *storage = rec->var.storage;
    switch (rec->var.type) {
    case MCA_BASE_VAR_TYPE_INT: rec->default_value.i = *(int *) storage; break;
    case MCA_BASE_VAR_TYPE_BOOL: rec->default_value.b = *(bool *) storage; break;
    case MCA_BASE_VAR_TYPE_SIZE: rec->default_value.z = *(size_t *) storage; break;
    case MCA_BASE_VAR_TYPE_STRING: rec->default_value.s = *(char **) storage; break;
    }
}

/* Free what the record owns and put the default back into the storage. */
static void release_record(mca_base_var_record_t *rec)
{
    void *storage = rec->var.storage;
    switch (rec->var.type) {
    case MCA_BASE_VAR_TYPE_INT: *(int *) storage = rec->default_value.i; break;
    case MCA_BASE_VAR_TYPE_BOOL: *(bool *) storage = rec->default_value.b; break;
    case MCA_BASE_VAR_TYPE_SIZE: *(size_t *) storage = rec->default_value.z; break;
    case MCA_BASE_VAR_TYPE_STRING:
        free(*(char **) storage);
        *(char **) storage = rec->default_value.s;
        break;
    }
    free(rec->full_name);
    free(rec->value);
}

void mca_base_var_release_component(const char *framework, const char *component)
{
    size_t kept = 0;
    for (size_t i = 0; i < num_records; i++) {
        const mca_base_var_t *var = &records[i].var;
        if (var->framework && var->component && 0 == strcmp(var->framework, framework) &&
            0 == strcmp(var->component, component)) {
            release_record(&records[i]);
        } else {
            records[kept++] = records[i];
        }
    }
    num_records = kept;
}

/* Where the value comes from: the name first, then its synonym, source by source. */
static const char *resolve(const mca_base_var_record_t *rec, mca_base_var_source_t *source,
                           const char **detail, const char **via)
{
    const char *names[2] = {rec->full_name, rec->var.synonym};
    for (int src = MCA_BASE_VAR_SOURCE_COMMAND_LINE; src > MCA_BASE_VAR_SOURCE_DEFAULT; src--) {
        for (int i = 0; i < 2 && names[i]; i++) {
            mca_base_var_source_t s;
            const char *d;
            const char *value = mca_base_var_lookup(names[i], &s, &d);
            if (value && (int) s == src) {
                *source = s;
                *detail = d;
                *via = names[i];
                return value;
            }
        }
    }
    return NULL;
}

int mca_base_var_register(const mca_base_var_t *var)
{
    char *full_name = join_name(var);
    if (NULL == full_name) {
        return OPAL_ERR_OUT_OF_RESOURCE;
    }
    mca_base_var_record_t *rec = find_record(full_name);
    if (rec) {
        free(full_name);
        release_record(rec);
        full_name = join_name(var);
    } else {
        if (num_records == max_records) {
            size_t n = max_records ? 2 * max_records : 32;
            mca_base_var_record_t *grown = realloc(records, n * sizeof(*records));
            if (NULL == grown) {
                free(full_name);
                return OPAL_ERR_OUT_OF_RESOURCE;
            }
            records = grown;
            max_records = n;
        }
        rec = &records[num_records++];
    }
    memset(rec, 0, sizeof(*rec));
    rec->var = *var;
    rec->full_name = full_name;
    save_default(rec);
    if (MCA_BASE_VAR_TYPE_STRING == var->type && *(char **) var->storage) {
        /* The default is the caller's (static) string: own a copy from now on. */
        *(char **) var->storage = strdup(*(char **) var->storage);
    }
    rec->value = format_default(var);
    rec->source = MCA_BASE_VAR_SOURCE_DEFAULT;
    rec->source_detail = "default";

    mca_base_var_source_t source;
    const char *detail, *via;
    const char *text = resolve(rec, &source, &detail, &via);
    if (NULL == text) {
        return OPAL_SUCCESS;
    }
    if (MCA_BASE_VAR_TYPE_STRING == var->type) {
        free(*(char **) var->storage);
        *(char **) var->storage = NULL;
    }
    int rc = apply_value(rec, text);
    if (OPAL_ERR_BAD_PARAM == rc) {
        char buf[96];
        opal_output("invalid value '%s' for MCA parameter '%s' (%s%s%s%s): expected %s", text,
                    rec->full_name, mca_base_var_source_name(source),
                    source == MCA_BASE_VAR_SOURCE_ENV ? " " MCA_BASE_ENV_PREFIX : ", ",
                    source == MCA_BASE_VAR_SOURCE_ENV ? via : detail,
                    strcmp(via, rec->full_name) ? " (synonym)" : "",
                    expected_text(var, buf, sizeof(buf)));
        return rc;
    }
    rec->source = source;
    rec->source_detail = detail;
    return rc;
}

int mca_base_var_register_array(const mca_base_var_t *vars, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int rc = mca_base_var_register(&vars[i]);
        if (OPAL_SUCCESS != rc) {
            return rc;
        }
    }
    return OPAL_SUCCESS;
}

void mca_base_var_foreach(void (*fn)(const mca_base_var_info_t *info, void *arg), void *arg)
{
    for (size_t i = 0; i < num_records; i++) {
        mca_base_var_info_t info = {
            .full_name = records[i].full_name,
            .help = records[i].var.help,
            .value = records[i].value,
            .source = records[i].source,
            .source_detail = records[i].source_detail,
            .type = records[i].var.type,
        };
        fn(&info, arg);
    }
}

int mca_base_var_init(int *pargc, char ***pargv)
{
    int rc = mca_base_var_store_load_files();
    if (OPAL_SUCCESS == rc && pargc && pargv) {
        rc = mca_base_var_store_take_argv(pargc, *pargv);
    }
    if (OPAL_SUCCESS != rc) {
        mca_base_var_finalize();
    }
    return rc;
}

void mca_base_var_finalize(void)
{
    for (size_t i = 0; i < num_records; i++) {
        release_record(&records[i]);
    }
    free(records);
    records = NULL;
    num_records = max_records = 0;
    mca_base_var_store_clear();
}
