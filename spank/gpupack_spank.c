/*
 * gpupack SPANK plugin: put the node agent's isolation answer into each job step.
 *
 * plugstack.conf (one line):
 *   required /usr/lib/slurm/gpupack_spank-22.05.so socket=/var/lib/gpupack/run/agent-%n.sock timeout_ms=3000
 *             spool=/var/lib/gpupack/agent/%n/unisolated
 * (required: a .so that fails to load stops the node's steps; optional would run them unisolated)
 *
 * Arguments:
 *   socket=PATH     the node agent's Unix socket; %n is replaced by the node name slurmd
 *                   gave slurmstepd (its NodeName: SLURMD_NODENAME in slurmstepd's own
 *                   environment, never the job's), so several slurmd on one host each reach
 *                   their agent
 *   timeout_ms=N    how long a step start waits for the agent, its connect() included (default 3000)
 *   spool=DIR       where a packed step that cannot be isolated is recorded for the helper
 *                   (%n as above; default /var/lib/gpupack/agent/%n/unisolated: the agent's
 *                   `--state-dir`/agent/<node>/unisolated)
 *
 * In each task, before privileges are dropped (slurm_spank_task_init_privileged, remote
 * context, root), it sends the job id, step id, uid and the GPUs/shards Slurm gave
 * (SLURM_JOB_GPUS, SLURM_STEP_GPUS, SLURM_SHARDS_ON_NODE) to the agent as one JSON line; the
 * agent reads only the one slurmstepd sets or clears for the step's type (SLURM_JOB_GPUS for
 * the batch and interactive steps, SLURM_STEP_GPUS for srun steps: the other is whatever the
 * user exported). The agent answers in lines, the last one END (framed: an answer without it, cut
 * short or not the agent's, is a refusal):
 *   OK <isolation>\nKEY=VALUE\n...\nEND\n        or        ERR <reason>\nEND\n
 * Only CUDA_* and GPUPACK_* variables are set. A job on a MIG device also gets the line
 *   FENCE <node>[,<node>...] <folder>
 * naming the driver's capability nodes it may open (its GPU instance's and compute
 * instance's, in /dev/nvidia-caps, or the simulated GPU's folder): the task moves to a mount
 * namespace of its own where a read-only tmpfs over <folder> holds only those nodes (bind
 * mounts of them), so no process of the job can open another job's MIG slice whatever
 * CUDA_VISIBLE_DEVICES says; the user, without CAP_SYS_ADMIN, cannot undo it (docs/fence.md).
 * With it comes the line
 *   DENY <major> <lo>-<hi>[,<lo>-<hi>...]
 * the other MIG capability nodes (major:minor), which the task's device cgroup then denies
 * (cgroup v1: devices.deny; cgroup v2, where no v1 devices controller exists: a BPF device
 * program, devcg_v2.h): Slurm's own cgroup of the job if the task is in one, else
 * <its cgroup>/gpupack/job<J>_step<S>_<slurmstepd pid>, which the task joins (removed at the
 * step's end; never the shared cgroup itself, which slurmd and other jobs are in). Through
 * /proc/<pid>/root of a process outside the namespace the nodes are still visible; the device
 * cgroup refuses their open (EPERM). A node with no cgroup at all gets the namespace only, and
 * the log says so.
 * A fence that cannot be made counts as an error (below). No answer in time, or an error: a step with
 * whole GPUs (no shards) runs with what Slurm gave it and the reason is logged. A packed step
 * (SLURM_SHARDS_ON_NODE > 0: it shares its GPU with other jobs) never runs unisolated: the
 * plugin (root, in the task) writes a record of it into the node's spool (spool=, root's,
 * 0700; slurm_plugin/agent/unisolated.py), then the task exits with GPUPACK_UNISOLATED_EXIT
 * before the program starts. The node's agent carries the record to the helper (also once it
 * is back, when it was down), which requeues the job at the head of the queue on that record
 * only (`requeue-unisolated`; no node is drained). The exit code alone is no evidence: slurm.conf
 * has no RequeueExit for it, and a job that exits 117 by itself is an ordinary failed job.
 * When a task exits (slurm_spank_task_exit, slurmstepd, root) it sends its exit code; the
 * agent answers "OK done", or "OK hold" for a packed job that ran out of memory in its share:
 * the plugin then asks again every HOLD_POLL_MS until the agent says done (the helper has
 * requeued the job, or decided not to), HOLD_MAX_MS passes, or the agent has answered no poll
 * for HOLD_SILENT_MS (a late answer is asked again), so slurmctld hears of the end only after
 * the requeue. At the end of a step (slurm_spank_exit, slurmstepd, root) it tells
 * the agent, which frees the job's isolation when its batch step ends.
 */
#define _GNU_SOURCE /* O_PATH, unshare() */
#include <errno.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <slurm/slurm.h>
#include <slurm/spank.h>

#include "devcg_v2.h" /* the cgroup v2 device program */

SPANK_PLUGIN(gpupack, 1);

#define REQ_MAX 8192
/* the exit code of a packed task that could not be isolated (slurm_plugin.helper.watches.unisolated.
 * UNISOLATED_EXIT); the node's record, not the code, is the helper's evidence */
#define GPUPACK_UNISOLATED_EXIT 117
#define RESP_MAX 16384
#define VAL_MAX 1024
#define PATHLIST_MAX 32768 /* the job's PYTHONPATH, read whole or not used */
#define HOLD_POLL_MS 500
#define HOLD_MAX_MS 90000 /* never hold a step's end longer, whatever the agent says (its own: 20-80 s) */
#define HOLD_SILENT_MS 15000 /* a held end whose agent answers no poll this long goes on */
#define FENCE_MAX 8 /* capability nodes one job may be given */

static char socket_tmpl[512] = "/run/gpupack/agent-%n.sock";
/* the agent refused because of the step's own variables (ERR-STEP): no record, so no requeue */
static int step_caused = 0;
static char spool_tmpl[512] = "/var/lib/gpupack/agent/%n/unisolated";
static int timeout_ms = 3000;

/* the agent picks the one slurmstepd set for the step's type (slurm_plugin/agent/isolation.py) */
static const char *forwarded_env[] = {
    "SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "SLURM_SHARDS_ON_NODE", NULL,
};

static void parse_args(int ac, char **av)
{
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "socket=", 7) == 0) {
            snprintf(socket_tmpl, sizeof(socket_tmpl), "%s", av[i] + 7);
        } else if (strncmp(av[i], "spool=", 6) == 0 && av[i][6] == '/') {
            snprintf(spool_tmpl, sizeof(spool_tmpl), "%s", av[i] + 6);
        } else if (strncmp(av[i], "timeout_ms=", 11) == 0) {
            int v = atoi(av[i] + 11);
            if (v > 0 && v <= 60000)
                timeout_ms = v;
            else
                slurm_error("gpupack: ignoring %s (expected 1..60000)", av[i]);
        } else {
            slurm_error("gpupack: unknown plugstack argument '%s' (known: socket=, timeout_ms=, spool=)", av[i]);
        }
    }
}

/* Append s to buf as a JSON string (with quotes); returns 0, or -1 when it does not fit. */
static int json_str(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t n = *len;
    if (n + 2 >= cap)
        return -1;
    buf[n++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *out = NULL;
        if (*p == '"') out = "\\\"";
        else if (*p == '\\') out = "\\\\";
        else if (*p < 0x20) { snprintf(esc, sizeof(esc), "\\u%04x", *p); out = esc; }
        if (out) {
            size_t k = strlen(out);
            if (n + k + 2 >= cap) return -1;
            memcpy(buf + n, out, k);
            n += k;
        } else {
            if (n + 3 >= cap) return -1;
            buf[n++] = (char)*p;
        }
    }
    buf[n++] = '"';
    buf[n] = '\0';
    *len = n;
    return 0;
}

static int append(char *buf, size_t cap, size_t *len, const char *s)
{
    size_t k = strlen(s);
    if (*len + k + 1 >= cap)
        return -1;
    memcpy(buf + *len, s, k + 1);
    *len += k;
    return 0;
}

/* The node's name as slurmd knows it (its NodeName, from slurmd's conf): slurmstepd puts it into
 * its own process environment (slurmstepd.c: setenvf(NULL, "SLURMD_NODENAME", conf->node_name), on
 * 22.05, 24.11 and 26.05) before it forks any task, and a task's process environment is still
 * slurmstepd's at task_init_privileged (the job's is only given to execve). The job's environment
 * (spank_getenv) is never read: at task_init_privileged on 22.05 it holds whatever the submitter
 * exported, and an srun step inside a batch job inherits the batch host's name. Empty when there is
 * none, or when it is not a plain host name (it is put in paths). */
static void node_name(spank_t sp, char *out, size_t cap)
{
    (void)sp;
    const char *e = getenv("SLURMD_NODENAME");
    out[0] = '\0';
    if (!e || !e[0] || e[0] == '.' || strlen(e) >= cap || strlen(e) > 255)
        return;
    for (const char *p = e; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return;
    snprintf(out, cap, "%s", e);
}

/* tmpl with %n replaced by node */
static void expand_node(const char *tmpl, const char *node, char *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = tmpl; *p && n + 1 < cap; p++) {
        if (p[0] == '%' && p[1] == 'n') {
            for (const char *q = node; *q && n + 1 < cap; q++)
                out[n++] = *q;
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

static void socket_path(const char *node, char *out, size_t cap)
{
    expand_node(socket_tmpl, node, out, cap);
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* Bound a blocking connect() by what is left of the budget: on a full listen backlog (an agent
 * flooded with connections, or stuck) an AF_UNIX connect() waits, with no timeout of its own, until
 * the agent accepts; Linux bounds that wait by SO_SNDTIMEO (and then fails with EAGAIN). */
static int bound_connect_wait(int fd, long deadline)
{
    long left = deadline - now_ms();
    if (left <= 0)
        return -1;
    struct timeval tv = {.tv_sec = left / 1000, .tv_usec = (left % 1000) * 1000};
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)); /* left > 0: never 0 (forever) */
}

/* Connect fd to addr before the deadline. An agent that is restarting is back within a second or
 * two: with retry_connect, retry until the deadline. Returns 0, or -1 with why filled in. */
static int connect_within(int fd, const struct sockaddr_un *addr, long deadline, int budget_ms,
                          int retry_connect, char *why, size_t why_cap)
{
    const char *path = addr->sun_path;
    while (1) {
        if (bound_connect_wait(fd, deadline) < 0) {
            snprintf(why, why_cap, "cannot connect to %s within %d ms", path, budget_ms);
            return -1;
        }
        if (connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0)
            break;
        int err = errno;
        if (err == EINTR && now_ms() < deadline)
            continue;
        if (retry_connect && (err == ENOENT || err == ECONNREFUSED || err == EAGAIN) && now_ms() + 100 < deadline) {
            usleep(100 * 1000);
            continue;
        }
        if (err == EAGAIN) /* SO_SNDTIMEO ran out: the backlog stayed full */
            snprintf(why, why_cap, "cannot connect to %s within %d ms: its backlog is full (is `gpupack agent` "
                     "flooded or stuck?)", path, budget_ms);
        else
            snprintf(why, why_cap, "cannot connect to %s: %s (is `gpupack agent` running?)", path, strerror(err));
        return -1;
    }
    struct timeval none = {0, 0}; /* the exchange is bounded by poll() on a non-blocking socket */
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
    return 0;
}

/* Send req, read the whole answer into resp. Returns 0, or -1 with why filled in. */
static int ask_agent(const char *path, const char *req, char *resp, size_t cap, int budget_ms,
                     int retry_connect, char *why, size_t why_cap)
{
    long deadline = now_ms() + budget_ms;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(addr.sun_path)) {
        snprintf(why, why_cap, "socket path too long: %s", path);
        return -1;
    }
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_cap, "socket(): %s", strerror(errno));
        return -1;
    }
    if (connect_within(fd, &addr, deadline, budget_ms, retry_connect, why, why_cap) < 0) {
        close(fd);
        return -1;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    size_t sent = 0, total = strlen(req), got = 0;
    while (1) {
        long left = deadline - now_ms();
        if (left <= 0) {
            snprintf(why, why_cap, "no answer from %s within %d ms", path, budget_ms);
            close(fd);
            return -1;
        }
        struct pollfd pfd = {.fd = fd, .events = sent < total ? POLLOUT : POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue; /* the deadline check above ends the loop */
        if (sent < total) {
            ssize_t w = send(fd, req + sent, total - sent, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EINTR) {
                snprintf(why, why_cap, "send to %s: %s", path, strerror(errno));
                close(fd);
                return -1;
            }
            if (w > 0)
                sent += (size_t)w;
            continue;
        }
        ssize_t n = recv(fd, resp + got, cap - 1 - got, 0);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0) {
            snprintf(why, why_cap, "recv from %s: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (got >= cap - 1) {
            snprintf(why, why_cap, "answer from %s is longer than %zu bytes", path, cap - 1);
            close(fd);
            return -1;
        }
    }
    resp[got] = '\0';
    close(fd);
    if (strlen(resp) != got) {
        snprintf(why, why_cap, "the answer from %s holds a NUL byte", path);
        return -1;
    }
    return 0;
}

/* The framework settings the agent answers (slurm_plugin/agent/framework_env.py, the same list): set
 * only where the job's own environment has none of them, so a user's own value stands. */
static const char *framework_vars[] = {
    "XLA_PYTHON_CLIENT_PREALLOCATE", "TF_FORCE_GPU_ALLOW_GROWTH", NULL,
};

static int framework_var(const char *name)
{
    for (int i = 0; framework_vars[i]; i++)
        if (strcmp(name, framework_vars[i]) == 0)
            return 1;
    return 0;
}

static int allowed_var(const char *name)
{
    if (framework_var(name))
        return 1;
    if (strncmp(name, "CUDA_", 5) != 0 && strncmp(name, "GPUPACK_", 8) != 0)
        return 0;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '_'))
            return 0;
    return 1;
}

/* The fence of a FENCE line, "<node>[,<node>...] <folder>": a private mount namespace in which
 * <folder> is a read-only tmpfs holding only bind mounts of the named nodes. Returns 0, or -1
 * with why filled in. Runs in the task (root, before privileges drop). */
static int apply_fence(char *spec, char *why, size_t why_cap)
{
    char *names[FENCE_MAX], *save = NULL, path[1200], src[64];
    int fds[FENCE_MAX], n = 0, rc = -1;
    char *space = strchr(spec, ' ');
    if (!space || space == spec || space[1] != '/') {
        snprintf(why, why_cap, "bad FENCE line from the agent: '%.200s'", spec);
        return -1;
    }
    *space = '\0';
    const char *dir = space + 1;
    /* first the namespace: the nodes are then opened through its own mounts (a bind mount's
     * source must be in the namespace it is made in) */
    if (unshare(CLONE_NEWNS) < 0) {
        snprintf(why, why_cap, "cannot fence to its MIG device: unshare(CLONE_NEWNS): %s", strerror(errno));
        return -1;
    }
    /* nothing mounted here may reach the node's namespace; EINVAL: "/" is no mount point (a
     * chroot), whose mounts the node made private */
    if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 && errno != EINVAL) {
        snprintf(why, why_cap, "cannot fence to its MIG device: making / a slave mount: %s", strerror(errno));
        return -1;
    }
    for (char *name = strtok_r(spec, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        if (n == FENCE_MAX || strchr(name, '/') || name[0] == '.') {
            snprintf(why, why_cap, "bad FENCE node '%.100s' (or more than %d) from the agent", name, FENCE_MAX);
            goto out;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        fds[n] = open(path, O_PATH | O_CLOEXEC); /* before the folder is hidden; opens no device */
        if (fds[n] < 0) {
            snprintf(why, why_cap, "cannot fence to its MIG device: %.400s: %s", path, strerror(errno));
            goto out;
        }
        names[n++] = name;
    }
    if (n == 0) {
        snprintf(why, why_cap, "FENCE line from the agent names no node");
        goto out;
    }
    if (mount("gpupack-fence", dir, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") < 0) {
        snprintf(why, why_cap, "cannot fence to its MIG device: tmpfs on %.400s: %s", dir, strerror(errno));
        goto out;
    }
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
        if (fd < 0 || close(fd) < 0) {
            snprintf(why, why_cap, "cannot fence to its MIG device: creating %.400s: %s", path, strerror(errno));
            goto out;
        }
        snprintf(src, sizeof(src), "/proc/self/fd/%d", fds[i]);
        if (mount(src, path, NULL, MS_BIND, NULL) < 0) {
            snprintf(why, why_cap, "cannot fence to its MIG device: binding %.400s: %s", path, strerror(errno));
            goto out;
        }
    }
    /* read-only: no node can be made there (a setuid nvidia-modprobe would make the others) */
    if (mount(NULL, dir, NULL, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
        snprintf(why, why_cap, "cannot fence to its MIG device: read-only %.400s: %s", dir, strerror(errno));
        goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < n; i++)
        close(fds[i]);
    return rc;
}

/* The mount point of the cgroup v1 devices hierarchy (from /proc/self/mountinfo), and the folder
 * of the hierarchy mounted there in root: 1 found, 0 none. */
static int devices_mount(char *mnt, size_t cap, char *root, size_t root_cap)
{
    return cgroup_mount("cgroup", "devices", mnt, cap, root, root_cap);
}

/* The task's cgroup in the v1 devices hierarchy (from /proc/self/cgroup): 1 found, 0 none. */
static int task_devices_cgroup(char *cg, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "re");
    char line[4096];
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL, *save = NULL, *tok;
        if (!c2)
            continue;
        *c2 = '\0';
        c2[1 + strcspn(c2 + 1, "\n")] = '\0';
        for (tok = strtok_r(c1 + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            if (strcmp(tok, "devices") == 0) {
                snprintf(cg, cap, "%s", c2 + 1);
                found = 1;
            }
    }
    fclose(f);
    return found;
}

/* Is cgroup path cg Slurm's cgroup of job (a "job_<job>" component)? */
static int is_job_cgroup(const char *cg, uint32_t job)
{
    char comp[32];
    size_t k = (size_t)snprintf(comp, sizeof(comp), "/job_%u", job);
    for (const char *p = strstr(cg, comp); p; p = strstr(p + 1, comp))
        if (p[k] == '/' || p[k] == '\0')
            return 1;
    return 0;
}

/* The v1 devices hierarchy's mount point and this process's cgroup in it, as a path below that
 * mount (a hierarchy mounted from one of its folders, as in a container, shows the cgroup's
 * path from the hierarchy's top in /proc/self/cgroup): 1 found, 0 none (no v1 controller). */
static int locate_devices_cgroup(char *mnt, size_t mnt_cap, char *cg, size_t cg_cap)
{
    char at[1024];
    if (!task_devices_cgroup(cg, cg_cap) || !devices_mount(mnt, mnt_cap, at, sizeof(at)))
        return 0;
    size_t k = strlen(at);
    if (strcmp(at, "/") != 0 && strncmp(cg, at, k) == 0 && (cg[k] == '/' || cg[k] == '\0'))
        memmove(cg, cg[k] ? cg + k : "/", strlen(cg[k] ? cg + k : "/") + 1);
    return 1;
}

/* The cgroup of ours a step's tasks join below cgroup cg: gpupack/job<J>_step<S>_<slurmstepd pid>
 * (the step daemon's pid: two clusters on one host never share one). */
static void own_cgroup(char *dir, size_t cap, const char *mnt, const char *cg, uint32_t job, uint32_t step,
                       int stepd)
{
    snprintf(dir, cap, "%s%s/gpupack/job%u_step%u_%d", mnt, strcmp(cg, "/") == 0 ? "" : cg, job, step, stepd);
}

static int write_text(const char *path, const char *text, char *why, size_t why_cap)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: writing '%s' to %.400s: %s", text, path,
                 strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* A cgroup that allows every device by default takes our denies as exceptions; one that denies
 * by default (only listed devices allowed) ignores a deny of a node its list allows through a
 * wildcard: refuse that, the fence would not hold. */
static int wildcard_allows(const char *dir, int major, char *why, size_t why_cap)
{
    char path[3300], line[256], type, maj[32], min[32], acc[8];
    snprintf(path, sizeof(path), "%s/devices.list", dir);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: %.400s: %s", path, strerror(errno));
        return -1;
    }
    int first = 1, bad = 0;
    while (!bad && fgets(line, sizeof(line), f)) {
        if (sscanf(line, " %c %31[^:]:%31s %7s", &type, maj, min, acc) != 4)
            continue;
        if (first && type == 'a')
            break; /* "a *:* rwm": every device allowed but the denied ones */
        first = 0;
        if ((type == 'a' || type == 'c') && (strcmp(maj, "*") == 0 || atoi(maj) == major) &&
            strcmp(min, "*") == 0 && strpbrk(acc, "rw"))
            bad = 1;
    }
    fclose(f);
    if (bad) {
        line[strcspn(line, "\n")] = '\0';
        snprintf(why, why_cap, "cannot fence in its device cgroup: %.400s allows every nvidia-caps node ('%.100s')",
                 path, line);
        return -1;
    }
    return 0;
}

/* The DENY line, "<major> <lo>-<hi>[,<lo>-<hi>...]" (or "<major> -": nothing to deny), into
 * major and at most DEVCG_RANGES_MAX inclusive ranges. 0, or -1 with why filled in. */
static int parse_deny(char *spec, int *major, int *lo, int *hi, int *n, char *why, size_t why_cap)
{
    char *save = NULL, *ranges = strchr(spec, ' ');
    *major = atoi(spec);
    *n = 0;
    if (*major <= 0 || !ranges) {
        snprintf(why, why_cap, "bad DENY line from the agent: '%.200s'", spec);
        return -1;
    }
    for (char *r = strtok_r(ranges + 1, ",", &save); r && strcmp(r, "-") != 0; r = strtok_r(NULL, ",", &save)) {
        int a = -1, b = -1;
        if (sscanf(r, "%d-%d", &a, &b) != 2 || a < 0 || b < a || b - a > (1 << 20) || *n == DEVCG_RANGES_MAX) {
            snprintf(why, why_cap, "bad DENY range '%.50s' (or more than %d) from the agent", r, DEVCG_RANGES_MAX);
            return -1;
        }
        lo[*n] = a;
        hi[(*n)++] = b;
    }
    return 0;
}

/* The cgroup of ours a task in the shared cgroup cg (below mount mnt) joins: made, its path in
 * dir. 0, or -1 with why filled in. */
static int make_own_cgroup(char *dir, size_t cap, const char *mnt, const char *cg, uint32_t job, uint32_t step,
                           char *why, size_t why_cap)
{
    snprintf(dir, cap, "%s%s/gpupack", mnt, strcmp(cg, "/") == 0 ? "" : cg);
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: mkdir %.400s: %s", dir, strerror(errno));
        return -1;
    }
    own_cgroup(dir, cap, mnt, cg, job, step, (int)getppid());
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: mkdir %.400s: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

/* Move this task into cgroup folder dir (v1 or v2: its cgroup.procs). */
static int join_cgroup(const char *dir, char *why, size_t why_cap)
{
    char path[3300], pid[32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    return write_text(path, pid, why, why_cap);
}

/* cgroup v1: one "c <major>:<minor> rwm" line per denied node in devices.deny of the task's devices
 * cgroup mnt+cg (Slurm's of this job, or one of ours the task joins). */
static int deny_v1(const char *mnt, const char *cg, int major, const int *lo, const int *hi, int nr, uint32_t job,
                   uint32_t step, char *why, size_t why_cap)
{
    char dir[3200], path[3300], rule[64];
    /* Slurm's cgroup of this job (task/cgroup v1: /slurm/uid_U/job_J/step_S[/task_T]) takes the
     * denies; any other (the root, slurmd's service cgroup) is shared with other jobs and slurmd
     * itself: the task joins a cgroup of ours below it, inheriting its rules */
    int own = !is_job_cgroup(cg, job), n = 0;
    if (own && make_own_cgroup(dir, sizeof(dir), mnt, cg, job, step, why, why_cap) < 0)
        return -1;
    if (!own)
        snprintf(dir, sizeof(dir), "%s%s", mnt, cg);
    snprintf(path, sizeof(path), "%s/devices.deny", dir);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_cap, "cannot fence in its device cgroup: %.400s: %s", path, strerror(errno));
        return -1;
    }
    for (int r = 0; r < nr; r++)
        for (int m = lo[r]; m <= hi[r]; m++, n++) {
            int k = snprintf(rule, sizeof(rule), "c %d:%d rwm", major, m);
            if (write(fd, rule, (size_t)k) != k) { /* one rule per write */
                snprintf(why, why_cap, "cannot fence in its device cgroup: writing '%s' to %.400s: %s", rule,
                         path, strerror(errno));
                close(fd);
                return -1;
            }
        }
    close(fd);
    if (wildcard_allows(dir, major, why, why_cap) < 0 || (own && join_cgroup(dir, why, why_cap) < 0))
        return -1;
    slurm_debug("gpupack: job %u step %u: %d MIG capability nodes denied in device cgroup %s", job, step, n, dir);
    return 0;
}

/* Slurm's step cgroup in the task's cgroup path cg of job (cgroup/v2: .../job_J/step_S/slurm for the
 * step daemon, where a task starts, .../job_J/step_S/user/task_T where slurmstepd then moves it):
 * cg cut after the component that follows "/job_J" (the job's cgroup if none follows). */
static void step_cgroup(char *cg, uint32_t job)
{
    char comp[32];
    size_t k = (size_t)snprintf(comp, sizeof(comp), "/job_%u", job);
    for (char *p = strstr(cg, comp); p; p = strstr(p + 1, comp))
        if (p[k] == '/' || p[k] == '\0') {
            char *end = p[k] ? strchr(p + k + 1, '/') : NULL;
            if (end)
                *end = '\0';
            return;
        }
}

/* cgroup v2: a BPF device program denying the ranges (devcg_v2.h), attached to Slurm's step cgroup
 * if the task is in its job's cgroup, else to a cgroup of ours below the task's own, which the task
 * then joins. The step's, not the task's own: this runs in the task just forked, while slurmstepd
 * moves it into its task cgroup (task/cgroup, before the program starts): the step's holds both.
 * Ours is a leaf with no controllers enabled, so cgroup v2's rule that a cgroup with controllers in
 * its subtree_control holds no processes is kept. */
static int deny_v2(const char *mnt, const char *cg, int major, const int *lo, const int *hi, int nr, uint32_t job,
                   uint32_t step, char *why, size_t why_cap)
{
    char dir[3200], at[2048];
    int own = !is_job_cgroup(cg, job);
    if (own && make_own_cgroup(dir, sizeof(dir), mnt, cg, job, step, why, why_cap) < 0)
        return -1;
    if (!own) {
        snprintf(at, sizeof(at), "%s", cg);
        step_cgroup(at, job);
        snprintf(dir, sizeof(dir), "%s%s", mnt, at);
    }
    /* attached before the task joins: it never runs there unfenced */
    if (devcg_attach(mnt, dir, major, lo, hi, nr, why, why_cap) < 0 || (own && join_cgroup(dir, why, why_cap) < 0))
        return -1;
    slurm_debug("gpupack: job %u step %u: %d ranges of MIG capability nodes denied by a BPF device program on "
                "cgroup %s", job, step, nr, dir);
    return 0;
}

/* The DENY line, "<major> <lo>-<hi>[,...]": the task's device cgroup denies those nodes, through the
 * cgroup v1 devices controller where the node has one, else a cgroup v2 BPF device program. Returns 0
 * (also where the node has no cgroup at all: logged), or -1 with why filled in. Runs in the task
 * (root, before privileges drop). */
static int apply_deny(spank_t sp, char *spec, uint32_t job, uint32_t step, char *why, size_t why_cap)
{
    char mnt[1024], cg[2048];
    int major = 0, nr = 0, lo[DEVCG_RANGES_MAX], hi[DEVCG_RANGES_MAX], task = 0;
    if (parse_deny(spec, &major, lo, hi, &nr, why, why_cap) < 0)
        return -1;
    if (locate_devices_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)))
        return deny_v1(mnt, cg, major, lo, hi, nr, job, step, why, why_cap);
    if (locate_v2_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)))
        return deny_v2(mnt, cg, major, lo, hi, nr, job, step, why, why_cap);
    spank_get_item(sp, S_TASK_ID, &task);
    if (task == 0)
        slurm_info("gpupack: job %u step %u: no device cgroup on this node (neither the cgroup v1 devices "
                   "controller nor cgroup v2): only its mount namespace fences the step's MIG capability nodes, "
                   "which a process of the same user outside it can still reach (docs/fence.md)", job, step);
    return 0;
}

/* At the step's end (slurmstepd, still in the cgroup its tasks were forked in): remove the
 * device cgroup of ours they joined, if empty (v1 or v2, whichever the tasks used; a v2 cgroup's
 * BPF program goes with it). */
static void remove_deny_cgroup(uint32_t job, uint32_t step)
{
    char mnt[1024], cg[2048], dir[3200];
    if (!locate_devices_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)) && !locate_v2_cgroup(mnt, sizeof(mnt), cg, sizeof(cg)))
        return;
    if (is_job_cgroup(cg, job))
        return;
    own_cgroup(dir, sizeof(dir), mnt, cg, job, step, (int)getpid());
    if (rmdir(dir) < 0 && errno != ENOENT)
        slurm_info("gpupack: job %u step %u: cannot remove device cgroup %s: %s", job, step, dir, strerror(errno));
}

/* An answer of got bytes in resp is framed: its last line is END (isolation.END_LINE) and it holds no
 * NUL byte. The END line is cut off (resp then ends with the newline before it). An answer cut short
 * (the agent died mid-answer, a full socket buffer) or not the agent's is never acted on. */
static int framed(char *resp, size_t got)
{
    if (strlen(resp) != got)
        return 0;
    if (got == 4 && strcmp(resp, "END\n") == 0)
        return 0; /* END alone: no answer in it */
    if (got < 5 || strcmp(resp + got - 5, "\nEND\n") != 0)
        return 0;
    resp[got - 4] = '\0';
    return 1;
}

/* "PREPEND PYTHONPATH=<folder>" (the agent's opt-in out-of-memory observer for Python jobs,
 * slurm_plugin/python_site): <folder> goes in front of the job's own PYTHONPATH, which is kept (it is
 * the job's, and only the job's processes read it). Only PYTHONPATH; the folder absolute, without ':'.
 * Returns 1 when set, 0 when ignored (said in slurmd's log). */
static int apply_prepend(spank_t sp, char *spec, uint32_t job, uint32_t step)
{
    char *eq = strchr(spec, '=');
    if (!eq || eq - spec != 10 || strncmp(spec, "PYTHONPATH", 10) != 0 || eq[1] != '/' || strchr(eq + 1, ':')) {
        slurm_error("gpupack: job %u step %u: ignoring 'PREPEND %.200s' from the agent (only PYTHONPATH, an "
                    "absolute folder without ':')", job, step, spec);
        return 0;
    }
    const char *folder = eq + 1;
    static char old[PATHLIST_MAX], val[PATHLIST_MAX + 1024];
    int n;
    spank_err_t got = spank_getenv(sp, "PYTHONPATH", old, sizeof(old));
    if (got == ESPANK_SUCCESS && old[0]) {
        n = snprintf(val, sizeof(val), "%s:%s", folder, old);
    } else if (got == ESPANK_SUCCESS || got == ESPANK_ENV_NOEXIST) {
        n = snprintf(val, sizeof(val), "%s", folder);
    } else { /* too long to read whole: never replace the job's own value with a part of it */
        slurm_error("gpupack: job %u step %u: its PYTHONPATH cannot be read whole (%s): left as it is", job,
                    step, spank_strerror(got));
        return 0;
    }
    if (n < 0 || (size_t)n >= sizeof(val) || spank_setenv(sp, "PYTHONPATH", val, 1) != ESPANK_SUCCESS) {
        slurm_error("gpupack: job %u step %u: cannot put %s in front of PYTHONPATH", job, step, folder);
        return 0;
    }
    return 1;
}

/* Apply "OK <isolation>\nFENCE ...\nPREPEND K=<folder>\nK=V\n...\nEND\n" to the step; returns the
 * number of variables set or -1. */
static int apply_answer(spank_t sp, char *resp, uint32_t job, uint32_t step, char *why, size_t why_cap)
{
    char *save = NULL;
    if (!framed(resp, strlen(resp))) {
        snprintf(why, why_cap, "the agent's answer has no END line (cut short, or not the agent's): '%.200s'", resp);
        return -1;
    }
    char *line = strtok_r(resp, "\n", &save);
    if (!line) {
        snprintf(why, why_cap, "empty answer");
        return -1;
    }
    if (strncmp(line, "OK", 2) != 0) {
        step_caused = strncmp(line, "ERR-STEP ", 9) == 0;
        snprintf(why, why_cap, "agent refused: %.400s", line);
        return -1;
    }
    const char *isolation = line[2] == ' ' ? line + 3 : "?";
    int set = 0;
    const char *fenced = "";
    while ((line = strtok_r(NULL, "\n", &save)) != NULL) {
        if (strncmp(line, "FENCE ", 6) == 0) {
            char *spec = line + 6;
            if (apply_fence(spec, why, why_cap) < 0)
                return -1;
            fenced = ", fenced to its MIG capability nodes";
            continue;
        }
        if (strncmp(line, "DENY ", 5) == 0) {
            if (apply_deny(sp, line + 5, job, step, why, why_cap) < 0)
                return -1;
            continue;
        }
        if (strncmp(line, "PREPEND ", 8) == 0) {
            set += apply_prepend(sp, line + 8, job, step);
            continue;
        }
        char *eq = strchr(line, '=');
        if (!eq)
            continue;
        *eq = '\0';
        if (!allowed_var(line)) {
            slurm_error("gpupack: job %u step %u: ignoring variable '%s' from the agent (only CUDA_*, GPUPACK_* "
                        "and the framework settings)", job, step, line);
            continue;
        }
        if (framework_var(line)) {
            spank_err_t rc = spank_setenv(sp, line, eq + 1, 0);
            if (rc == ESPANK_ENV_EXISTS)
                slurm_info("gpupack: job %u step %u: %s kept as the job set it", job, step, line);
            else if (rc != ESPANK_SUCCESS)
                slurm_error("gpupack: job %u step %u: cannot set %s", job, step, line);
            else
                set++;
            continue;
        }
        if (spank_setenv(sp, line, eq + 1, 1) != ESPANK_SUCCESS) {
            slurm_error("gpupack: job %u step %u: cannot set %s", job, step, line);
            continue;
        }
        set++;
    }
    slurm_info("gpupack: job %u step %u: isolation %s (%d variables set%s)", job, step, isolation, set, fenced);
    return set;
}

/* Which device cgroup this node's MIG fences will use, said once in slurmd's log when it starts.
 * Where only cgroup v2 exists and the kernel refuses the BPF device program, every packed MIG step
 * here would fail its fence (and be requeued): an error now, before a job finds out. */
static void report_fence_support(void)
{
    char mnt[1024], at[1024], why[600] = "";
    if (devices_mount(mnt, sizeof(mnt), at, sizeof(at))) {
        slurm_info("gpupack: MIG fences on this node deny capability nodes through the cgroup v1 devices "
                   "controller (%s)", mnt);
        return;
    }
    if (!v2_mount(mnt, sizeof(mnt), at, sizeof(at))) {
        slurm_error("gpupack: this node has no device cgroup (neither the cgroup v1 devices controller nor "
                    "cgroup v2): packed MIG steps are fenced by their mount namespace only, which a process of "
                    "the same user outside it can get round (docs/fence.md)");
        return;
    }
    if (devcg_probe(why, sizeof(why)) < 0) {
        slurm_error("gpupack: this node %s; every packed MIG step here will fail its fence and be requeued "
                    "(exit %d). Let slurmd call bpf(2) (no seccomp filter or lockdown refusing it, a kernel "
                    "with CONFIG_CGROUP_BPF, CAP_BPF or CAP_SYS_ADMIN), or mount the cgroup v1 devices "
                    "controller (docs/fence.md)", why, GPUPACK_UNISOLATED_EXIT);
        return;
    }
    slurm_info("gpupack: MIG fences on this node deny capability nodes through a cgroup v2 BPF device program "
               "(%s)", mnt);
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)sp;
    parse_args(ac, av);
    if (spank_context() == S_CTX_SLURMD)
        report_fence_support();
    return ESPANK_SUCCESS;
}

static int ids(spank_t sp, uint32_t *job, uint32_t *step, uint32_t *uid)
{
    uid_t u = 0;
    if (spank_get_item(sp, S_JOB_ID, job) != ESPANK_SUCCESS)
        return -1;
    if (spank_get_item(sp, S_JOB_STEPID, step) != ESPANK_SUCCESS)
        return -1;
    if (uid && spank_get_item(sp, S_JOB_UID, &u) == ESPANK_SUCCESS)
        *uid = (uint32_t)u;
    return 0;
}

/* The shards Slurm gave the step on this node (0: none, whole GPUs or no GPU). */
static int step_shards(spank_t sp)
{
    char v[32];
    if (spank_getenv(sp, "SLURM_SHARDS_ON_NODE", v, sizeof(v)) != ESPANK_SUCCESS)
        return 0;
    return atoi(v) > 0 ? atoi(v) : 0;
}

/* The spool folder, made root's and 0700 where missing (its parents 0755); 0 when it is root's and
 * nobody else may write it, else -1 with why filled in. */
static int spool_dir(const char *dir, char *why, size_t why_cap)
{
    struct stat st;
    if (lstat(dir, &st) < 0) {
        char tmp[700];
        if (errno != ENOENT || snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp)) {
            snprintf(why, why_cap, "spool %.400s: %s", dir, strerror(errno));
            return -1;
        }
        for (char *p = tmp + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                (void)mkdir(tmp, 0755);
                *p = '/';
            }
        if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || lstat(dir, &st) < 0) {
            snprintf(why, why_cap, "cannot make spool %.400s: %s", dir, strerror(errno));
            return -1;
        }
    }
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        snprintf(why, why_cap, "spool %.400s is not a folder of uid %u that only it may write", dir,
                 (unsigned)geteuid());
        return -1;
    }
    return 0;
}

/* Root's record that this packed step did not start, for the helper (slurm_plugin/agent/unisolated.py):
 * <spool>/<job>.<step>.<pid>.json, written whole (a temporary name, then rename). */
static void record_unisolated(uint32_t job, uint32_t step, uint32_t uid, const char *node, int shards,
                              const char *reason)
{
    char dir[700], path[900], tmp[900], body[2048], num[160], why[600];
    size_t len = 0;
    int bad = 0;
    expand_node(spool_tmpl, node, dir, sizeof(dir));
    if (spool_dir(dir, why, sizeof(why)) < 0) {
        slurm_error("gpupack: job %u step %u: %s; the helper will not requeue it (the job fails)", job, step, why);
        return;
    }
    snprintf(path, sizeof(path), "%s/%u.%u.%d.json", dir, job, step, (int)getpid());
    snprintf(tmp, sizeof(tmp), "%s/.%u.%u.%d.tmp", dir, job, step, (int)getpid());
    snprintf(num, sizeof(num), "{\"job_id\":%u,\"step_id\":%u,\"uid\":%u,\"shards\":%d,\"at\":%ld,\"node\":", job,
             step, uid, shards, (long)time(NULL));
    bad |= append(body, sizeof(body), &len, num);
    bad |= json_str(body, sizeof(body), &len, node);
    bad |= append(body, sizeof(body), &len, ",\"reason\":");
    bad |= json_str(body, sizeof(body), &len, reason);
    bad |= append(body, sizeof(body), &len, "}\n");
    int fd = bad ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, body, len) != (ssize_t)len || fsync(fd) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
        slurm_error("gpupack: job %u step %u: cannot record it in %s: %s; the helper will not requeue it", job,
                    step, dir, bad ? "record too long" : strerror(errno));
        if (fd >= 0)
            unlink(tmp);
        return;
    }
}

/* Isolation failed. Whole GPUs: the step runs with what Slurm gave it. Shards: the task
 * (this process, just forked by slurmstepd) is recorded in the node's spool and exits before the
 * program starts. */
static int not_isolated(spank_t sp, uint32_t job, uint32_t step, const char *node, const char *why)
{
    char cvd[VAL_MAX] = "unset";
    spank_getenv(sp, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd));
    int shards = step_shards(sp);
    if (shards > 0) {
        uid_t u = 0;
        spank_get_item(sp, S_JOB_UID, &u);
        slurm_error("gpupack: job %u step %u on %s: %s; a packed step (%d shards) never runs unisolated "
                    "beside other jobs: it does not start (exit %d; recorded for the helper, which requeues it)",
                    job, step, node[0] ? node : "?", why, shards, GPUPACK_UNISOLATED_EXIT);
        if (step_caused)
            slurm_error("gpupack: job %u step %u: refused for what the step itself says: not recorded, so the "
                        "helper neither requeues nor lifts it", job, step);
        else if (node[0])
            record_unisolated(job, step, (uint32_t)u, node, shards, why);
        _exit(GPUPACK_UNISOLATED_EXIT);
    }
    slurm_error("gpupack: job %u step %u on %s: %s; the step runs with what Slurm gave it "
                "(CUDA_VISIBLE_DEVICES=%s)", job, step, node[0] ? node : "?", why, cvd);
    return ESPANK_SUCCESS;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return ESPANK_SUCCESS;
    uint32_t job = 0, step = 0, uid = 0;
    if (ids(sp, &job, &step, &uid) < 0)
        return not_isolated(sp, 0, 0, "", "cannot read the job/step id");
    if (step == SLURM_EXTERN_CONT)
        return ESPANK_SUCCESS;
    char node[256], path[700], num[64], val[VAL_MAX];
    node_name(sp, node, sizeof(node));
    if (!node[0])
        return not_isolated(sp, job, step, node, "slurmstepd gave no node name (SLURMD_NODENAME in its own "
                                                 "environment)");
    socket_path(node, path, sizeof(path));

    char req[REQ_MAX];
    size_t len = 0;
    int bad = 0;
    snprintf(num, sizeof(num), "%u", job);
    bad |= append(req, sizeof(req), &len, "{\"op\":\"isolate\",\"format\":\"lines\",\"job_id\":");
    bad |= append(req, sizeof(req), &len, num);
    snprintf(num, sizeof(num), ",\"step_id\":%u,\"uid\":%u,\"node\":", step, uid);
    bad |= append(req, sizeof(req), &len, num);
    bad |= json_str(req, sizeof(req), &len, node);
    bad |= append(req, sizeof(req), &len, ",\"env\":{");
    int first = 1;
    for (int i = 0; forwarded_env[i]; i++) {
        if (spank_getenv(sp, forwarded_env[i], val, sizeof(val)) != ESPANK_SUCCESS)
            continue;
        if (!first)
            bad |= append(req, sizeof(req), &len, ",");
        first = 0;
        bad |= json_str(req, sizeof(req), &len, forwarded_env[i]);
        bad |= append(req, sizeof(req), &len, ":");
        bad |= json_str(req, sizeof(req), &len, val);
    }
    bad |= append(req, sizeof(req), &len, "}}\n");
    if (bad)
        return not_isolated(sp, job, step, node, "request too large");

    char resp[RESP_MAX], why[600];
    if (ask_agent(path, req, resp, sizeof(resp), timeout_ms, 1, why, sizeof(why)) < 0 ||
        apply_answer(sp, resp, job, step, why, sizeof(why)) < 0)
        return not_isolated(sp, job, step, node, why);
    return ESPANK_SUCCESS;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return ESPANK_SUCCESS;
    uint32_t job = 0, step = 0;
    int status = 0;
    if (ids(sp, &job, &step, NULL) < 0 || step == SLURM_EXTERN_CONT ||
        spank_get_item(sp, S_TASK_EXIT_STATUS, &status) != ESPANK_SUCCESS)
        return ESPANK_SUCCESS;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
    if (code == 0)
        return ESPANK_SUCCESS; /* a clean exit is never held */
    char node[256], path[700], req[1024], resp[1024], why[600];
    node_name(sp, node, sizeof(node));
    if (!node[0])
        return ESPANK_SUCCESS;
    socket_path(node, path, sizeof(path));
    size_t len = 0;
    snprintf(req, sizeof(req), "{\"op\":\"task_exit\",\"format\":\"lines\",\"job_id\":%u,\"step_id\":%u,"
             "\"exit_code\":%d,\"node\":", job, step, code);
    len = strlen(req);
    if (json_str(req, sizeof(req), &len, node) < 0 || append(req, sizeof(req), &len, "}\n") < 0)
        return ESPANK_SUCCESS;
    long deadline = now_ms() + HOLD_MAX_MS;
    long unanswered_since = 0; /* when the agent stopped answering the polls of a held end (0: it answers) */
    int held = 0;
    for (int first = 1;; first = 0) {
        /* The first ask is where the agent does the work (the end judged, the output's tail read): it gets the
         * plugin's whole budget, as a step's start does (an agent reshaping a GPU's MIG layout holds its lock
         * for seconds); each later poll 1 s at most. */
        int budget = first || timeout_ms < 1000 ? timeout_ms : 1000;
        if (ask_agent(path, req, resp, sizeof(resp), budget, 0, why, sizeof(why)) < 0) {
            if (first) {
                slurm_error("gpupack: job %u step %u: the node agent did not take its end (exit %d): %s", job, step,
                            code, why);
                break;
            }
            /* A held end: a poll the agent did not answer in time (an agent slowed by a loaded node, its lock
             * held by a MIG reshape) is asked again; only an agent silent for HOLD_SILENT_MS lets the end go on
             * (before: the first late poll did, and the job's out-of-memory end became a failure). */
            long now = now_ms();
            if (!unanswered_since) {
                unanswered_since = now;
                slurm_info("gpupack: job %u step %u: the node agent did not answer a poll of its held end (%s); "
                           "asking again", job, step, why);
            }
            if (now - unanswered_since >= HOLD_SILENT_MS || now >= deadline) {
                slurm_error("gpupack: job %u step %u: the node agent has not answered for %ld ms: its end goes on "
                            "(%s)", job, step, now - unanswered_since, why);
                break;
            }
            usleep(HOLD_POLL_MS * 1000);
            continue;
        }
        unanswered_since = 0;
        if (!framed(resp, strlen(resp)) || strcmp(resp, "OK hold\n") != 0 || now_ms() >= deadline)
            break;
        if (!held)
            slurm_info("gpupack: job %u step %u ended (exit %d); its end waits for the node agent (an "
                       "out-of-memory end for the helper to requeue, or where its output is)", job, step, code);
        held = 1;
        usleep(HOLD_POLL_MS * 1000);
    }
    return ESPANK_SUCCESS;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!spank_remote(sp))
        return ESPANK_SUCCESS;
    uint32_t job = 0, step = 0;
    if (ids(sp, &job, &step, NULL) < 0 || step == SLURM_EXTERN_CONT)
        return ESPANK_SUCCESS;
    remove_deny_cgroup(job, step);
    char node[256], path[700], req[1024], resp[1024], why[600];
    node_name(sp, node, sizeof(node));
    if (!node[0])
        return ESPANK_SUCCESS;
    socket_path(node, path, sizeof(path));
    size_t len = 0;
    snprintf(req, sizeof(req), "{\"op\":\"step_end\",\"format\":\"lines\",\"job_id\":%u,\"step_id\":%u,\"node\":", job, step);
    len = strlen(req);
    if (json_str(req, sizeof(req), &len, node) < 0 || append(req, sizeof(req), &len, "}\n") < 0)
        return ESPANK_SUCCESS;
    /* no retry at the end: the job must not wait; the agent reconciles against squeue */
    if (ask_agent(path, req, resp, sizeof(resp), timeout_ms < 1000 ? timeout_ms : 1000, 0, why, sizeof(why)) < 0)
        slurm_info("gpupack: job %u step %u: could not tell the agent the step ended (%s); "
                   "it frees the isolation when it sees the job gone", job, step, why);
    return ESPANK_SUCCESS;
}
