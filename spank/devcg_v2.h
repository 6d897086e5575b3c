/*
 * The device-cgroup half of the MIG fence on a cgroup v2 node (no v1 devices controller):
 * cgroup v2 has no devices.deny; its device control is a BPF_PROG_TYPE_CGROUP_DEVICE program
 * attached to the cgroup, run on every open/mknod of a device node by a process in that cgroup
 * or below it (docs/fence.md). Included by gpupack_spank.c; raw bpf(2) calls, no libbpf.
 *
 * The program, generated from the agent's DENY line "<major> <lo>-<hi>[,...]":
 *   char device of <major> whose minor is in one of the ranges -> 0 (the kernel answers EPERM)
 *   anything else                                              -> 1 (allowed: other programs
 *   attached with it, Slurm's or systemd's, still decide for themselves; all must allow)
 * attached with BPF_F_ALLOW_MULTI to the task's cgroup: Slurm's cgroup of the job if the task is
 * in one (cgroup/v2: .../job_J/step_S/user/task_T), else a cgroup of ours below its own,
 * gpupack/job<J>_step<S>_<slurmstepd pid>, which the task joins (as on v1).
 */
#include <linux/bpf.h>
#include <stddef.h>
#include <sys/syscall.h>

#define DEVCG_RANGES_MAX 128 /* ranges one program denies: 2 instructions each */
#define DEVCG_INSNS_MAX (8 + 2 * DEVCG_RANGES_MAX)

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

/* One BPF instruction (struct bpf_insn: opcode, dst/src registers, offset, immediate). */
static struct bpf_insn insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm)
{
    struct bpf_insn i;
    memset(&i, 0, sizeof(i));
    i.code = code;
    i.dst_reg = dst;
    i.src_reg = src;
    i.off = off;
    i.imm = imm;
    return i;
}

/* The program for major and the n inclusive minor ranges lo[i]..hi[i] (n <= DEVCG_RANGES_MAX).
 * r1 is the context (struct bpf_cgroup_dev_ctx); a jump's offset counts from the next insn.
 *   0  r2 = ctx->access_type            (u32 load)
 *   1  r2 &= 0xffff                     (the device type; the access is in the high half)
 *   2  if r2 != BPF_DEVCG_DEV_CHAR goto ALLOW
 *   3  r2 = ctx->major
 *   4  if r2 != major goto ALLOW
 *   5  r2 = ctx->minor
 *   6+2i  if r2 < lo[i] goto 8+2i        (skip the next: this range does not hold it)
 *   7+2i  if r2 <= hi[i] goto DENY
 *   ALLOW = 6+2n: r0 = 1; exit
 *   DENY  = 8+2n: r0 = 0; exit          (left out when n is 0: the verifier refuses dead code)
 * Returns the number of instructions. */
static int devcg_program(struct bpf_insn *p, int major, const int *lo, const int *hi, int n)
{
    const int allow = 6 + 2 * n, deny = allow + 2;
    int k = 0;
    p[k++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, offsetof(struct bpf_cgroup_dev_ctx, access_type), 0);
    p[k++] = insn(BPF_ALU64 | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff);
    p[k] = insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, (int16_t)(allow - k - 1), BPF_DEVCG_DEV_CHAR), k++;
    p[k++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, offsetof(struct bpf_cgroup_dev_ctx, major), 0);
    p[k] = insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, (int16_t)(allow - k - 1), major), k++;
    p[k++] = insn(BPF_LDX | BPF_MEM | BPF_W, BPF_REG_2, BPF_REG_1, offsetof(struct bpf_cgroup_dev_ctx, minor), 0);
    for (int i = 0; i < n; i++) {
        p[k++] = insn(BPF_JMP | BPF_JLT | BPF_K, BPF_REG_2, 0, 1, lo[i]);
        p[k] = insn(BPF_JMP | BPF_JLE | BPF_K, BPF_REG_2, 0, (int16_t)(deny - k - 1), hi[i]), k++;
    }
    p[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1);
    p[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    if (n > 0) {
        p[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0);
        p[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    }
    return k;
}

/* Load the program: its fd, or -1 with why filled in (the verifier's last words in it). */
static int devcg_load(const struct bpf_insn *p, int count, char *why, size_t why_cap)
{
    static char vlog[4096];
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    vlog[0] = '\0';
    a.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
    a.insns = (uint64_t)(uintptr_t)p;
    a.insn_cnt = (uint32_t)count;
    a.license = (uint64_t)(uintptr_t)"GPL";
    a.log_buf = (uint64_t)(uintptr_t)vlog;
    a.log_size = sizeof(vlog);
    a.log_level = 1;
    snprintf(a.prog_name, sizeof(a.prog_name), "gpupack_fence");
    int fd = (int)sys_bpf(BPF_PROG_LOAD, &a);
    if (fd < 0)
        snprintf(why, why_cap, "cannot fence in its device cgroup: loading the BPF device program: %s%s%.200s",
                 strerror(errno), vlog[0] ? "; verifier: " : "", vlog);
    return fd;
}

/* The device programs attached to cgroup folder dir itself: their count, their attach flags in
 * *flags; -1 when it cannot be asked. */
static int devcg_query(const char *dir, uint32_t *flags)
{
    union bpf_attr a;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.query.target_fd = (uint32_t)fd;
    a.query.attach_type = BPF_CGROUP_DEVICE;
    long rc = sys_bpf(BPF_PROG_QUERY, &a);
    int err = errno;
    close(fd);
    errno = err;
    if (rc < 0)
        return -1;
    *flags = a.query.attach_flags;
    return (int)a.query.prog_cnt;
}

/* May a program of ours go into cgroup folder dir (below the v2 mount mnt) without taking
 * another's place? The nearest ancestor with a device program decides: attached with
 * BPF_F_ALLOW_MULTI, ours runs beside it; with BPF_F_ALLOW_OVERRIDE ours would replace it
 * below (Slurm's or systemd's rules would stop applying): refused; with no flag the kernel
 * refuses the attach itself. 0, or -1 with why filled in. */
static int devcg_ancestors_allow(const char *mnt, const char *dir, char *why, size_t why_cap)
{
    char up[3200];
    size_t top = strlen(mnt);
    snprintf(up, sizeof(up), "%s", dir);
    while (strlen(up) > top && strrchr(up, '/')) {
        uint32_t flags = 0;
        *strrchr(up, '/') = '\0'; /* the parent, up to the mount point (the root cgroup) */
        int cnt = devcg_query(up, &flags);
        if (cnt < 0) {
            snprintf(why, why_cap, "cannot fence in its device cgroup: asking %.400s for its device programs: %s",
                     up, strerror(errno));
            return -1;
        }
        if (cnt > 0 && !(flags & BPF_F_ALLOW_MULTI)) {
            snprintf(why, why_cap, "cannot fence in its device cgroup: %.400s has a device program attached "
                     "without BPF_F_ALLOW_MULTI (flags %u), which a program below it would %s", up, flags,
                     flags & BPF_F_ALLOW_OVERRIDE ? "replace" : "not be allowed beside");
            return -1;
        }
        if (cnt > 0)
            return 0;
    }
    return 0;
}

/* Attach the program for the DENY ranges to cgroup folder dir. 0, or -1 with why filled in. */
static int devcg_attach(const char *mnt, const char *dir, int major, const int *lo, const int *hi, int n,
                        char *why, size_t why_cap)
{
    struct bpf_insn prog[DEVCG_INSNS_MAX];
    union bpf_attr a;
    if (devcg_ancestors_allow(mnt, dir, why, why_cap) < 0)
        return -1;
    int pfd = devcg_load(prog, devcg_program(prog, major, lo, hi, n), why, why_cap);
    if (pfd < 0)
        return -1;
    int cfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cfd < 0) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: %.400s: %s", dir, strerror(errno));
        close(pfd);
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.target_fd = (uint32_t)cfd;
    a.attach_bpf_fd = (uint32_t)pfd;
    a.attach_type = BPF_CGROUP_DEVICE;
    a.attach_flags = BPF_F_ALLOW_MULTI;
    /* the cgroup keeps the program attached after our fds close, until it is removed */
    long rc = sys_bpf(BPF_PROG_ATTACH, &a);
    int err = errno;
    close(cfd);
    close(pfd);
    if (rc < 0) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: attaching the BPF device program to %.400s: %s",
                 dir, strerror(err));
        return -1;
    }
    return 0;
}

/* The cgroup v2 mount point and the folder of the hierarchy mounted there (from
 * /proc/self/mountinfo): 1 found, 0 none. */
static int v2_mount(char *mnt, size_t cap, char *root, size_t root_cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char *dash = strstr(line, " - ");
        char point[1024], fstype[64], at[1024];
        if (dash && sscanf(line, "%*s %*s %*s %1023s %1023s", at, point) == 2 &&
            sscanf(dash + 3, "%63s", fstype) == 1 && strcmp(fstype, "cgroup2") == 0) {
            snprintf(mnt, cap, "%s", point);
            snprintf(root, root_cap, "%s", at);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* The v2 mount point and this process's v2 cgroup ("0::<path>" of /proc/self/cgroup) as a path
 * below it: 1 found, 0 none (no cgroup v2 on this node). */
static int locate_v2_cgroup(char *mnt, size_t mnt_cap, char *cg, size_t cg_cap)
{
    char at[1024], line[4096];
    int found = 0;
    if (!v2_mount(mnt, mnt_cap, at, sizeof(at)))
        return 0;
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f))
        if (strncmp(line, "0::", 3) == 0) {
            line[strcspn(line, "\n")] = '\0';
            size_t len = strlen(line + 3);
            if (len < cg_cap) { /* a longer path is no cgroup we could name */
                memcpy(cg, line + 3, len + 1);
                found = 1;
            }
        }
    fclose(f);
    size_t k = strlen(at);
    if (found && strcmp(at, "/") != 0 && strncmp(cg, at, k) == 0 && (cg[k] == '/' || cg[k] == '\0'))
        memmove(cg, cg[k] ? cg + k : "/", strlen(cg[k] ? cg + k : "/") + 1);
    return found && cg[0] == '/';
}
