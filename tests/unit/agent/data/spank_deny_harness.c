/* The SPANK plugin's device-cgroup part (apply_deny, remove_deny_cgroup) run outside slurmstepd:
 * the plugin's source with the few slurmstepd calls it makes stubbed.
 *   harness JOB "<major> <ranges>" [NODE...]: apply the DENY line as task 0 of step 0 of JOB,
 *   print "rc=<rc> why=<why>", then "open <node> <errno name or OK>" for each node, then the
 *   task's cgroup ("cgroup <path>": the devices line of /proc/self/cgroup, or the v2 one).
 *   With HARNESS_CGROUP=v2 (or none) in the environment it first hides the cgroup v1 devices
 *   hierarchy (and the v2 one) in a mount namespace of its own, so the plugin's own choice takes
 *   the v2 path (or none) on a host that has both; the task is then a child of the harness,
 *   which then plays slurmstepd at the step's end (remove_deny_cgroup) and prints "removed".
 *   harness support -: what slurmd logs at its start about the node's device cgroup (with
 *   HARNESS_NO_BPF set, after dropping the capabilities a BPF device program needs).
 *   harness query DIR: "progs <count> flags <attach flags>" of the device programs on cgroup DIR.
 *   harness attach DIR FLAGS MAJOR MINOR: attach to DIR, with those attach flags, a device program
 *   that denies that one node and allows all else (a stand-in for Slurm's or systemd's).
 *   (tests/unit/agent/test_spank_device_cgroup.py) */
#include <stdarg.h>
#include <linux/capability.h>
#include <sys/syscall.h>
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
const char *spank_strerror(spank_err_t e) { return e == ESPANK_NOSPACE ? "no space" : "error"; }
int spank_remote(spank_t sp) { (void)sp; return 1; }
spank_context_t spank_context(void) { return S_CTX_SLURMD; }
static void say(const char *level, const char *fmt, va_list ap) { printf("%s: ", level); vprintf(fmt, ap); printf("\n"); }
void slurm_info(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("info", fmt, ap); va_end(ap); }
void slurm_error(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("error", fmt, ap); va_end(ap); }
void slurm_debug(const char *fmt, ...) { va_list ap; va_start(ap, fmt); say("debug", fmt, ap); va_end(ap); }

/* Unmount (in this process's own mount namespace) every cgroup hierarchy of type fstype ("cgroup"
 * with the devices controller, or "cgroup2"). */
static void hide(const char *fstype)
{
    char mnt[1024], at[1024];
    while (strcmp(fstype, "cgroup2") == 0 ? v2_mount(mnt, sizeof(mnt), at, sizeof(at))
                                          : devices_mount(mnt, sizeof(mnt), at, sizeof(at)))
        /* a slave first: the unmount must not reach the host's namespace */
        if (mount(NULL, mnt, NULL, MS_REC | MS_SLAVE, NULL) < 0 || umount2(mnt, MNT_DETACH) < 0) {
            perror(mnt);
            exit(3);
        }
}

static void task(int argc, char **argv)
{
    char why[600] = "", spec[4096], cg[2048], mnt[1024];
    const char *mode = getenv("HARNESS_CGROUP");
    snprintf(spec, sizeof(spec), "%s", argv[2]);
    int rc = apply_deny(NULL, spec, (uint32_t)atoi(argv[1]), 0, why, sizeof(why));
    printf("rc=%d why=%s\n", rc, why);
    for (int i = 3; i < argc; i++) {
        int fd = open(argv[i], O_RDONLY);
        printf("open %s %s\n", argv[i], fd >= 0 ? "OK" : errno == EPERM ? "EPERM" : errno == ENXIO ? "ENXIO" : strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    if (mode ? locate_v2_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)) : task_devices_cgroup(cg, sizeof(cg)))
        printf("cgroup %s\n", cg);
    fflush(stdout);
}

/* This process without CAP_SYS_ADMIN and CAP_BPF (39), as slurmd under a lockdown or a seccomp
 * filter: the kernel then refuses to load a cgroup device program (EPERM). */
static void drop_bpf_capabilities(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0)
        exit(4);
    d[0].effective &= ~(1u << CAP_SYS_ADMIN);
    d[1].effective &= ~(1u << (39 - 32));
    if (syscall(SYS_capset, &h, d) < 0)
        exit(4);
}

int main(int argc, char **argv)
{
    const char *mode = getenv("HARNESS_CGROUP");
    if (argc < 3)
        return 2;
    if (strcmp(argv[1], "query") == 0) {
        uint32_t flags = 0, id = 0;
        int n = devcg_query(argv[2], &flags, &id);
        printf("progs %d flags %u\n", n, flags);
        return n < 0;
    }
    if (strcmp(argv[1], "attach") == 0 && argc == 6) {
        struct bpf_insn p[DEVCG_INSNS_MAX];
        char why[600] = "";
        union bpf_attr a;
        int minor = atoi(argv[5]);
        int pfd = devcg_load(p, devcg_program(p, atoi(argv[4]), &minor, &minor, 1, NULL, 0), why, sizeof(why));
        memset(&a, 0, sizeof(a));
        a.target_fd = (uint32_t)open(argv[2], O_RDONLY | O_DIRECTORY);
        a.attach_bpf_fd = (uint32_t)pfd;
        a.attach_type = BPF_CGROUP_DEVICE;
        a.attach_flags = (uint32_t)atoi(argv[3]);
        if (pfd < 0 || sys_bpf(BPF_PROG_ATTACH, &a) < 0) {
            printf("attach failed: %s %s\n", why, strerror(errno));
            return 1;
        }
        return 0;
    }
    if (mode) {
        /* EINVAL: "/" is no mount point (a chroot, as in the Debian roots) */
        if (unshare(CLONE_NEWNS) < 0 || (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 && errno != EINVAL)) {
            perror("mount namespace");
            return 3;
        }
        hide("cgroup");
        if (strcmp(mode, "none") == 0)
            hide("cgroup2");
    }
    if (strcmp(argv[1], "support") == 0) {
        if (getenv("HARNESS_NO_BPF"))
            drop_bpf_capabilities();
        report_fence_support();
        return 0;
    }
    if (!mode) {
        task(argc, argv);
        return 0;
    }
    fflush(stdout);
    pid_t pid = fork(); /* the task: its parent, this process, is the step daemon */
    if (pid == 0) {
        task(argc, argv);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    remove_deny_cgroup((uint32_t)atoi(argv[1]), 0);
    printf("removed\n");
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
