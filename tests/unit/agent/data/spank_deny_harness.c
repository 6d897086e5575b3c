/* The SPANK plugin's device-cgroup part (apply_deny, remove_deny_cgroup) run outside slurmstepd:
 * the plugin's source with the few slurmstepd calls it makes stubbed.
 *   harness JOB "<major> <ranges>" [NODE...]: apply the DENY line as task 0 of step 0 of JOB,
 *   print "rc=<rc> why=<why>", then "open <node> <errno name or OK>" for each node, then the
 *   devices line of /proc/self/cgroup. With HARNESS_CGROUP=v2 in the environment: the cgroup v2
 *   path (deny_v2: the BPF device program), whatever else the node has, and the v2 line.
 *   harness query DIR: "progs <count> flags <attach flags>" of the device programs on cgroup DIR.
 *   (tests/unit/agent/test_spank_device_cgroup.py) */
#include <stdarg.h>
#include "gpupack_spank.c"

spank_err_t spank_get_item(spank_t sp, spank_item_t item, ...)
{
    (void)sp;
    va_list ap;
    va_start(ap, item);
    if (item == S_TASK_ID)
        *va_arg(ap, int *) = 0;
    va_end(ap);
    return ESPANK_SUCCESS;
}
spank_err_t spank_getenv(spank_t sp, const char *var, char *buf, int len) { (void)sp; (void)var; (void)buf; (void)len; return ESPANK_ENV_NOEXIST; }
spank_err_t spank_setenv(spank_t sp, const char *var, const char *val, int o) { (void)sp; (void)var; (void)val; (void)o; return ESPANK_SUCCESS; }
int spank_remote(spank_t sp) { (void)sp; return 1; }
static void say(const char *level, const char *fmt, va_list ap) { printf("%s: ", level); vprintf(fmt, ap); printf("\n"); }
void slurm_info(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("info", fmt, ap); va_end(ap); }
void slurm_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("error", fmt, ap); va_end(ap); }
void slurm_debug(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("debug", fmt, ap); va_end(ap); }

int main(int argc, char **argv)
{
    char why[600] = "", spec[4096], cg[2048], mnt[1024];
    const char *mode = getenv("HARNESS_CGROUP");
    int v2 = mode && strcmp(mode, "v2") == 0, rc = -1;
    if (argc < 3)
        return 2;
    if (strcmp(argv[1], "query") == 0) {
        uint32_t flags = 0;
        int n = devcg_query(argv[2], &flags);
        printf("progs %d flags %u\n", n, flags);
        return n < 0;
    }
    snprintf(spec, sizeof(spec), "%s", argv[2]);
    if (!v2) {
        rc = apply_deny(NULL, spec, (uint32_t)atoi(argv[1]), 0, why, sizeof(why));
    } else {
        int major, lo[DEVCG_RANGES_MAX], hi[DEVCG_RANGES_MAX], n;
        if (parse_deny(spec, &major, lo, hi, &n, why, sizeof(why)) == 0 && locate_v2_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)))
            rc = deny_v2(mnt, cg, major, lo, hi, n, (uint32_t)atoi(argv[1]), 0, why, sizeof(why));
    }
    printf("rc=%d why=%s\n", rc, why);
    for (int i = 3; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        printf("open %s %s\n", argv[i], fd >= 0 ? "OK" : errno == EPERM ? "EPERM" : errno == ENXIO ? "ENXIO" : strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    if (v2 ? locate_v2_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)) : task_devices_cgroup(cg, sizeof(cg)))
        printf("cgroup %s\n", cg);
    fflush(stdout);
    return 0;
}
