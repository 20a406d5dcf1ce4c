/* A fake libnvidia-ml.so.1 for the agent's NVML tests (no GPU, no driver).
 *
 * Only the entry points nvidia-ml-py (pynvml) calls for what gleaner.runtime_agent.nvml does:
 * nvmlInit_v2 / nvmlInitWithFlags, nvmlShutdown, nvmlErrorString, nvmlDeviceGetCount_v2,
 * nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByUUID, nvmlDeviceGetMemoryInfo
 * (nvmlMemory_t v1: unsigned long long total, free, used), and
 * nvmlDeviceGetComputeRunningProcesses_v3 / nvmlDeviceGetGraphicsRunningProcesses_v3
 * (nvmlProcessInfo_v2_t: unsigned pid, unsigned long long usedGpuMemory, unsigned
 * gpuInstanceId, computeInstanceId; the size query first, as pynvml calls them).
 *
 * State comes from the file named by GLEANER_FAKE_NVML_STATE, read again at every call so a
 * test can change free memory while the agent runs: one line per device,
 * "<uuid> <total bytes> <free bytes> [<pids>]", where <pids> is a comma-separated list of
 * the compute processes on the device (none when absent or "-"; "!" fails the process
 * query with NVML_ERROR_GPU_IS_LOST; graphics processes are always none). No such file: nvmlInit fails with
 * NVML_ERROR_DRIVER_NOT_LOADED (9). A device whose free field is "-" fails its memory query
 * with NVML_ERROR_GPU_IS_LOST (15). Every memory query appends "mem <uuid>" to the file named
 * by GLEANER_FAKE_NVML_LOG (when set), so tests can count queries.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_GPU_IS_LOST = 15,
};

#define MAX_DEVICES 16
#define MAX_PROCS 32
#define UUID_LEN 96

struct fake_device {
    char uuid[UUID_LEN];
};
typedef struct fake_device *nvmlDevice_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* Handles point into this table; a device keeps its slot (by UUID) across state reloads. */
static struct fake_device devices[MAX_DEVICES];
static int initialized;

struct state_row {
    char uuid[UUID_LEN];
    unsigned long long total, free;
    int free_known;
    int procs_known;
    unsigned int npids;
    unsigned int pids[MAX_PROCS];
};

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

static int load_state(struct state_row *rows, int cap) {
    const char *path = getenv("GLEANER_FAKE_NVML_STATE");
    if (path == NULL) return -1;
    FILE *f = fopen(path, "r");
    if (f == NULL) return -1;
    int n = 0;
    char line[256];
    while (n < cap && fgets(line, sizeof line, f) != NULL) {
        char uuid[UUID_LEN], free_s[32], pids_s[160] = "-";
        unsigned long long total;
        if (sscanf(line, "%95s %llu %31s %159s", uuid, &total, free_s, pids_s) < 3) continue;
        rows[n].procs_known = strcmp(pids_s, "!") != 0;
        rows[n].npids = 0;
        if (rows[n].procs_known && strcmp(pids_s, "-") != 0) {
            char *save = NULL;
            for (char *tok = strtok_r(pids_s, ",", &save); tok != NULL && rows[n].npids < MAX_PROCS;
                 tok = strtok_r(NULL, ",", &save))
                rows[n].pids[rows[n].npids++] = (unsigned int)strtoul(tok, NULL, 10);
        }
        snprintf(rows[n].uuid, UUID_LEN, "%s", uuid);
        rows[n].total = total;
        rows[n].free_known = strcmp(free_s, "-") != 0;
        rows[n].free = rows[n].free_known ? strtoull(free_s, NULL, 10) : 0;
        n++;
    }
    fclose(f);
    return n;
}

static nvmlDevice_t slot_for(const char *uuid) {
    for (int i = 0; i < MAX_DEVICES; i++)
        if (strcmp(devices[i].uuid, uuid) == 0) return &devices[i];
    for (int i = 0; i < MAX_DEVICES; i++)
        if (devices[i].uuid[0] == '\0') {
            snprintf(devices[i].uuid, UUID_LEN, "%s", uuid);
            return &devices[i];
        }
    return NULL;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    struct state_row rows[MAX_DEVICES];
    if (load_state(rows, MAX_DEVICES) < 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    initialized++;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    initialized--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct state_row rows[MAX_DEVICES];
    int n = load_state(rows, MAX_DEVICES);
    *count = n < 0 ? 0 : (unsigned int)n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct state_row rows[MAX_DEVICES];
    int n = load_state(rows, MAX_DEVICES);
    if (n < 0 || index >= (unsigned int)n) return NVML_ERROR_INVALID_ARGUMENT;
    *device = slot_for(rows[index].uuid);
    return *device == NULL ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct state_row rows[MAX_DEVICES];
    int n = load_state(rows, MAX_DEVICES);
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].uuid, uuid) == 0) {
            *device = slot_for(uuid);
            return *device == NULL ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
        }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    const char *log_path = getenv("GLEANER_FAKE_NVML_LOG");
    if (log_path != NULL) {
        FILE *log = fopen(log_path, "a");
        if (log != NULL) {
            fprintf(log, "mem %s\n", device->uuid);
            fclose(log);
        }
    }
    struct state_row rows[MAX_DEVICES];
    int n = load_state(rows, MAX_DEVICES);
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].uuid, device->uuid) == 0) {
            if (!rows[i].free_known) return NVML_ERROR_GPU_IS_LOST;
            memory->total = rows[i].total;
            memory->free = rows[i].free;
            memory->used = rows[i].total - rows[i].free;
            return NVML_SUCCESS;
        }
    return NVML_ERROR_GPU_IS_LOST;
}

static nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int *count,
                                      nvmlProcessInfo_t *infos, int graphics) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    struct state_row rows[MAX_DEVICES];
    int n = load_state(rows, MAX_DEVICES);
    for (int i = 0; i < n; i++) {
        if (strcmp(rows[i].uuid, device->uuid) != 0) continue;
        if (!rows[i].procs_known) return NVML_ERROR_GPU_IS_LOST;
        unsigned int have = graphics ? 0 : rows[i].npids;
        if (*count < have || (infos == NULL && have > 0)) {
            *count = have;
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        for (unsigned int k = 0; k < have; k++) {
            infos[k].pid = rows[i].pids[k];
            infos[k].usedGpuMemory = 1ULL << 30;
            infos[k].gpuInstanceId = 0xFFFFFFFFu;
            infos[k].computeInstanceId = 0xFFFFFFFFu;
        }
        *count = have;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_GPU_IS_LOST;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(device, count, infos, 0);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return running_processes(device, count, infos, 1);
}
