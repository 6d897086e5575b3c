/* The SPANK plugin's task hooks run outside slurmstepd: the plugin's source with the slurmstepd
 * calls it makes stubbed (tests/unit/agent/test_spank_task_hooks.py).
 *   harness task [PLUGSTACK ARG...]: slurm_spank_task_init_privileged as task 0, then "rc=<rc>";
 *     a packed step that is not isolated exits 117 (the plugin's _exit) instead.
 *   harness exit [PLUGSTACK ARG...]: slurm_spank_task_exit (the task exited 1), then "held=<0|1>".
 * The process environment is slurmstepd's own (SLURMD_NODENAME: what slurmstepd set from slurmd's
 * conf); the job's environment, which spank_getenv reads, is every variable JOB_<NAME> of it (the
 * submitter's). H_JOB, H_STEP, H_UID: the spank items. spank_setenv prints "setenv NAME=VALUE". */
#include <stdarg.h>
#include "gpupack_spank.c"

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    (void)sp;
    va_list ap;
    va_start(ap, item);
    const char *j = getenv("H_JOB"), *s = getenv("H_STEP"), *u = getenv("H_UID");
    if (item == S_TASK_ID)
        *va_arg(ap, int *) = 0;
    else if (item == S_JOB_ID)
        *va_arg(ap, uint32_t *) = (uint32_t)strtoul(j ? j : "7", NULL, 10);
    else if (item == S_JOB_STEPID)
        *va_arg(ap, uint32_t *) = (uint32_t)strtoul(s ? s : "4294967291", NULL, 10);
    else if (item == S_JOB_UID)
        *va_arg(ap, uid_t *) = (uid_t)strtoul(u ? u : "1000", NULL, 10);
    else if (item == S_TASK_EXIT_STATUS)
        *va_arg(ap, int *) = 1 << 8; /* exited 1 */
    va_end(ap);
    return ESPANK_SUCCESS;
}
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len)
{
    (void)sp;
    char key[300];
    snprintf(key, sizeof(key), "JOB_%s", var);
    const char *v = getenv(key);
    if (!v)
        return ESPANK_ENV_NOEXIST;
    if ((int)strlen(v) >= len)
        return ESPANK_NOSPACE; /* as Slurm's: a value is read whole or not at all */
    snprintf(buf, (size_t)len, "%s", v);
    return ESPANK_SUCCESS;
}
spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int o)
{
    (void)sp;
    (void)o;
    printf("setenv %s=%s\n", var, val);
    return ESPANK_SUCCESS;
}
const char *spank_strerror(spank_err_t e) { return e == ESPANK_NOSPACE ? "no space" : "error"; }
int spank_remote(spank_t sp) { (void)sp; return 1; }
spank_context_t spank_context(void) { return S_CTX_REMOTE; }
static void say(const char *level, const char *fmt, va_list ap) { printf("%s: ", level); vprintf(fmt, ap); printf("\n"); fflush(stdout); }
void slurm_info(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("info", fmt, ap); va_end(ap); }
void slurm_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("error", fmt, ap); va_end(ap); }
void slurm_debug(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("debug", fmt, ap); va_end(ap); }

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 2)
        return 2;
    parse_args(argc - 2, argv + 2);
    if (strcmp(argv[1], "task") == 0) {
        printf("rc=%d\n", slurm_spank_task_init_privileged(NULL, 0, NULL));
        return 0;
    }
    if (strcmp(argv[1], "exit") == 0) {
        long t0 = now_ms();
        slurm_spank_task_exit(NULL, 0, NULL);
        printf("held=%d\n", now_ms() - t0 >= HOLD_POLL_MS);
        return 0;
    }
    return 2;
}
