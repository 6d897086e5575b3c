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
 * attached with BPF_F_ALLOW_MULTI to the task's cgroup: Slurm's step cgroup if the task is in its
 * job's (cgroup/v2: .../job_J/step_S, above both .../step_S/slurm, where the task is forked, and
 * .../step_S/user/task_T, where slurmstepd moves it), else a cgroup of ours below its own,
 * gpupack/job<J>_step<S>_<slurmstepd pid>, which the task joins (as on v1).
 *
 * The kernel's rules (linux/bpf.h, "cgroup-bpf attach flags"): the nearest cgroup at or above
 * ours that has a device program decides. Attached with BPF_F_ALLOW_MULTI (systemd's), ours runs
 * beside it. Attached with BPF_F_ALLOW_OVERRIDE (Slurm's cgroup/v2 on its job and step cgroups
 * under ConstrainDevices), a program below it replaces it for the cgroups below; attached with no
 * flag (Slurm's on a task cgroup), only a program with the same flags may replace it. In those
 * two cases ours takes the place of that program P: our checks, then P's own instructions (read
 * back from the kernel), so P's rules still apply where ours allow.
 */
#include <linux/bpf.h>
#include <stddef.h>
#include <sys/syscall.h>

#define DEVCG_RANGES_MAX 128 /* ranges one program denies: 2 instructions each */
#define DEVCG_INSNS_MAX (11 + 2 * DEVCG_RANGES_MAX)
#define DEVCG_TAIL_MAX 4096 /* instructions of a program ours takes the place of (Slurm's: a few per device) */

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

/* The program for major and the n inclusive minor ranges lo[i]..hi[i] (n <= DEVCG_RANGES_MAX),
 * followed by tail (another program's instructions, what it allows is then up to them) or by
 * "allow". r1 is the context (struct bpf_cgroup_dev_ctx), left untouched for the tail; a jump's
 * offset counts from the next instruction.
 *   0  r2 = ctx->access_type            (u32 load)
 *   1  r2 &= 0xffff                     (the device type; the access is in the high half)
 *   2  if r2 != BPF_DEVCG_DEV_CHAR goto ALLOW
 *   3  r2 = ctx->major
 *   4  if r2 != major goto ALLOW
 *   5  r2 = ctx->minor
 *   6+2i  if r2 < lo[i] goto 8+2i        (skip the next: this range does not hold it)
 *   7+2i  if r2 <= hi[i] goto DENY
 *   6+2n  goto ALLOW
 *   DENY  = 7+2n: r0 = 0; exit
 *   ALLOW = 9+2n: r0 = 1; exit, or the tail
 * With n = 0 only the ALLOW part (the verifier refuses unreachable code). Returns the number of
 * instructions (p holds DEVCG_INSNS_MAX + ntail). */
static int devcg_program(struct bpf_insn *p, int major, const int *lo, const int *hi, int n,
                         const struct bpf_insn *tail, int ntail)
{
    const int allow = n > 0 ? 9 + 2 * n : 0, deny = 7 + 2 * n;
    int k = 0;
    if (n > 0) {
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
        p[k++] = insn(BPF_JMP | BPF_JA, 0, 0, 2, 0);
        p[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0);
        p[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
    }
    if (ntail > 0) {
        memcpy(p + k, tail, (size_t)ntail * sizeof(*tail));
        return k + ntail;
    }
    p[k++] = insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1);
    p[k++] = insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
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

/* Whether this kernel loads a cgroup device program here (a program that allows everything, loaded
 * and closed, attached nowhere): 0, or -1 with why filled in (seccomp or a lockdown refusing
 * bpf(2), a kernel without CONFIG_CGROUP_BPF, no CAP_BPF/CAP_SYS_ADMIN). */
static int devcg_probe(char *why, size_t why_cap)
{
    struct bpf_insn p[DEVCG_INSNS_MAX];
    int fd = devcg_load(p, devcg_program(p, 0, NULL, NULL, 0, NULL, 0), why, why_cap);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* The ids of the device programs attached to cgroup folder dir itself (at most cap of them into
 * ids): their count (all of them, also past cap), their attach flags in *flags; -1 when it cannot
 * be asked. */
static int devcg_programs(const char *dir, uint32_t *ids, uint32_t cap, uint32_t *flags)
{
    union bpf_attr a;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof(a));
    a.query.target_fd = (uint32_t)fd;
    a.query.attach_type = BPF_CGROUP_DEVICE;
    a.query.prog_ids = (uint64_t)(uintptr_t)ids;
    a.query.prog_cnt = cap;
    long rc = sys_bpf(BPF_PROG_QUERY, &a);
    int err = errno;
    close(fd);
    errno = err;
    if (rc < 0 && err != ENOSPC) /* ENOSPC: more than cap, the count is still set */
        return -1;
    *flags = a.query.attach_flags;
    return (int)a.query.prog_cnt;
}

/* The device programs attached to cgroup folder dir itself: their count, their attach flags in
 * *flags, the first one's id in *id; -1 when it cannot be asked. */
static int devcg_query(const char *dir, uint32_t *flags, uint32_t *id)
{
    uint32_t ids[1] = {0};
    int n = devcg_programs(dir, ids, 1, flags);
    *id = ids[0];
    return n;
}

/* The instructions of the loaded program id (as the kernel runs them) into out (cap of them):
 * their count, or -1 with why filled in. */
static int devcg_read_program(uint32_t id, struct bpf_insn *out, int cap, char *why, size_t why_cap)
{
    union bpf_attr a;
    struct bpf_prog_info info;
    memset(&a, 0, sizeof(a));
    a.prog_id = id;
    int fd = (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &a), n = -1;
    if (fd < 0) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: program %u: %s", id, strerror(errno));
        return -1;
    }
    for (int pass = 0; pass < 2; pass++) { /* its length, then its instructions */
        uint32_t len = pass ? info.xlated_prog_len : 0;
        memset(&info, 0, sizeof(info));
        info.xlated_prog_len = len;
        info.xlated_prog_insns = (uint64_t)(uintptr_t)out;
        memset(&a, 0, sizeof(a));
        a.info.bpf_fd = (uint32_t)fd;
        a.info.info_len = sizeof(info);
        a.info.info = (uint64_t)(uintptr_t)&info;
        if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0 ||
            (pass == 0 && (info.xlated_prog_len == 0 || info.xlated_prog_len > (uint32_t)cap * sizeof(*out)))) {
            snprintf(why, why_cap, "cannot fence in its device cgroup: reading program %u: %s", id,
                     info.xlated_prog_len ? "too long" : strerror(errno));
            close(fd);
            return -1;
        }
        n = (int)(info.xlated_prog_len / sizeof(*out));
    }
    close(fd);
    return n;
}

/* The tag (the kernel's hash of its instructions) of the program of fd into tag: 0, or -1. */
static int devcg_tag(int fd, uint8_t *tag)
{
    union bpf_attr a;
    struct bpf_prog_info info;
    memset(&info, 0, sizeof(info));
    memset(&a, 0, sizeof(a));
    a.info.bpf_fd = (uint32_t)fd;
    a.info.info_len = sizeof(info);
    a.info.info = (uint64_t)(uintptr_t)&info;
    if (sys_bpf(BPF_OBJ_GET_INFO_BY_FD, &a) < 0)
        return -1;
    memcpy(tag, info.tag, BPF_TAG_SIZE);
    return 0;
}

/* Is a program with tag already attached to cgroup folder dir (another task of the step put the
 * same one there)? 1 yes, 0 no or unknown. */
static int devcg_attached(const char *dir, const uint8_t *tag)
{
    uint32_t ids[64], flags = 0; /* the kernel's limit of programs per cgroup and type */
    uint8_t other[BPF_TAG_SIZE];
    int found = 0, n = devcg_programs(dir, ids, 64, &flags);
    for (int i = 0; !found && i < n && i < 64; i++) {
        union bpf_attr b;
        memset(&b, 0, sizeof(b));
        b.prog_id = ids[i];
        int pfd = (int)sys_bpf(BPF_PROG_GET_FD_BY_ID, &b);
        if (pfd < 0)
            continue;
        found = devcg_tag(pfd, other) == 0 && memcmp(other, tag, BPF_TAG_SIZE) == 0;
        close(pfd);
    }
    return found;
}

/* The nearest cgroup at or above folder dir (up to the v2 mount mnt, the root cgroup) that has a
 * device program: 1 and its attach flags and its program's id, 0 none, -1 with why filled in. */
static int devcg_decider(const char *mnt, const char *dir, uint32_t *flags, uint32_t *id, int *at_dir,
                         char *why, size_t why_cap)
{
    char up[3200];
    size_t top = strlen(mnt);
    snprintf(up, sizeof(up), "%s", dir);
    for (*at_dir = 1;; *at_dir = 0) {
        int cnt = devcg_query(up, flags, id);
        if (cnt < 0) {
            snprintf(why, why_cap, "cannot fence in its device cgroup: asking %.400s for its device programs: %s",
                     up, strerror(errno));
            return -1;
        }
        if (cnt > 0)
            return 1;
        if (strlen(up) <= top || !strrchr(up, '/'))
            return 0;
        *strrchr(up, '/') = '\0'; /* the parent */
    }
}

/* Attach the program for the DENY ranges to cgroup folder dir (above). 0, or -1 with why filled in. */
static int devcg_attach(const char *mnt, const char *dir, int major, const int *lo, const int *hi, int n,
                        char *why, size_t why_cap)
{
    static struct bpf_insn prog[DEVCG_INSNS_MAX + DEVCG_TAIL_MAX], tail[DEVCG_TAIL_MAX];
    uint32_t flags = 0, id = 0, attach = BPF_F_ALLOW_MULTI;
    int at_dir = 0, ntail = 0;
    union bpf_attr a;
    int found = devcg_decider(mnt, dir, &flags, &id, &at_dir, why, why_cap);
    if (found < 0)
        return -1;
    if (found && !(flags & BPF_F_ALLOW_MULTI)) {
        /* ours takes that program's place (it would replace it, or it takes no other beside it) */
        if (!at_dir && !(flags & BPF_F_ALLOW_OVERRIDE)) {
            snprintf(why, why_cap, "cannot fence in its device cgroup: a cgroup above %.400s has a device program "
                     "that allows no other below it (attached with no flag)", dir);
            return -1;
        }
        if ((ntail = devcg_read_program(id, tail, DEVCG_TAIL_MAX, why, why_cap)) < 0)
            return -1;
        if (at_dir)
            attach = flags; /* the same flags replace it */
    }
    int pfd = devcg_load(prog, devcg_program(prog, major, lo, hi, n, tail, ntail), why, why_cap);
    uint8_t tag[BPF_TAG_SIZE];
    if (pfd < 0)
        return -1;
    if (found && at_dir && (flags & BPF_F_ALLOW_MULTI) && devcg_tag(pfd, tag) == 0 && devcg_attached(dir, tag)) {
        close(pfd); /* the step's other tasks share the cgroup: one copy of the same program is enough */
        return 0;
    }
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
    a.attach_flags = attach;
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
    if (ntail)
        slurm_debug("gpupack: the device program %u of cgroup %s%s is taken into ours (%d instructions)", id,
                    at_dir ? "" : "above ", dir, ntail);
    return 0;
}

/* A cgroup hierarchy's mount point and the folder of the hierarchy mounted there (from
 * /proc/self/mountinfo): of type fstype ("cgroup2", or "cgroup" with the controller among its
 * options): 1 found, 0 none. */
static int cgroup_mount(const char *fstype, const char *controller, char *mnt, size_t cap, char *root,
                        size_t root_cap)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char *dash = strstr(line, " - "), *save = NULL, *tok;
        char point[1024], type[64], opts[1024] = "", at[1024];
        if (!dash || sscanf(line, "%*s %*s %*s %1023s %1023s", at, point) != 2 ||
            sscanf(dash + 3, "%63s %*s %1023s", type, opts) < 1 || strcmp(type, fstype) != 0)
            continue;
        for (tok = controller ? strtok_r(opts, ",", &save) : NULL; tok && !found; tok = strtok_r(NULL, ",", &save))
            found = strcmp(tok, controller) == 0;
        if (found || !controller) {
            snprintf(mnt, cap, "%s", point);
            snprintf(root, root_cap, "%s", at);
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* The cgroup v2 mount point and the folder of the hierarchy mounted there: 1 found, 0 none. */
static int v2_mount(char *mnt, size_t cap, char *root, size_t root_cap)
{
    return cgroup_mount("cgroup2", NULL, mnt, cap, root, root_cap);
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
