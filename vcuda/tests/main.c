/*
 * main.c - vctest: runs the cases below (all, or those named as arguments) and prints
 * "N passed, M failed"; exits 1 if any failed. `vctest child <mode> ...` is a child process.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

int t_harness_init(void);
int t_harness_take_failure(char *why, size_t n);

#define CASES(X)                                                                               \
	X(config_layout) X(config_missing_fails_closed) X(config_corrupt_fails_closed)          \
	X(config_env_fallback_only_when_allowed) X(mem_every_path_counted)                      \
	X(mem_over_cap_oom_no_leak) X(mem_multi_device) X(mem_killed_process_returns) X(mem_restart_new_pid_namespace)           \
	X(mem_stress_8proc_16thr) X(routing_dlsym) X(routing_get_proc_address)                  \
	X(compute_none_policy_full_gpu) X(compute_accuracy_1proc_small)                         \
	X(compute_accuracy_1proc_large) X(compute_accuracy_4proc_small)                         \
	X(compute_accuracy_4proc_large) X(compute_local_start_no_overshoot) X(compute_launch_variants) X(compute_two_containers_1_9) \
	X(compute_balance_bursts_and_gives_back) X(compute_pid_namespace_fallback)           \
	X(node_allowance_obeyed) X(node_unlimited) X(node_stale_holds_fallback)               \
	X(node_rules_over_local_rate) X(node_bursts) X(node_slots) X(node_slot_confines) X(node_slot_bounds_queue)                                           \
	X(context_counted_on_every_path) X(context_shared_cap_across_processes)                 \
	X(context_larger_than_cap_refused) X(workload_tool_json) X(workload_stamps_and_slots)   \
	X(workload_slot_flag_checked)                                                          \
	X(nvml_running_processes_host_pids) X(nvml_process_utilization_host_pids)     \
	X(fake_models_the_gpu) X(fake_time_slices) X(mps_env_rules) X(mps_env_applied) X(mps_fake_speed)             \
	X(mps_fake_client) X(mps_fake_pinned_limit) X(fake_power_capped_clocks) X(fake_clock_follows_power) \
	X(event_fifo_done_after_its_work) X(event_sliced_done_after_its_work)                  \
	X(event_mps_done_after_its_lane) X(event_unrecorded_is_complete)                       \
	X(event_destroy_bad_handle) X(event_create_needs_context)                              \
	X(event_capture_refuses_record) X(event_capture_mode_per_thread)
#define CHILDREN(X)                                                                           \
	X(config_probe) X(mem_paths) X(mem_over_cap) X(mem_multi) X(mem_hold) X(mem_check)      \
	X(mem_stress) X(routing) X(burn) X(ctx_paths) X(ctx_hold) X(nvml_procs) X(nvml_proc_util)  \
	X(fake_model) X(slice_deep) X(slice_probe) X(mps_env) X(mps_client) X(clock_probe) X(clock_saturate) \
	X(event)

#define DECL_CASE(n) void test_##n(void);
#define DECL_CHILD(n) int child_##n(int argc, char **argv);
CASES(DECL_CASE)
CHILDREN(DECL_CHILD)

#define CASE_ENTRY(n) { #n, test_##n },
#define CHILD_ENTRY(n) { #n, child_##n },

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	const struct t_case cases[] = { CASES(CASE_ENTRY) };
	const struct t_child children[] = { CHILDREN(CHILD_ENTRY) };
	if (argc >= 3 && strcmp(argv[1], "child") == 0) {
		for (size_t i = 0; i < sizeof(children) / sizeof(children[0]); i++)
			if (strcmp(children[i].mode, argv[2]) == 0)
				_exit_child(children[i].fn(argc - 3, argv + 3));
		fprintf(stderr, "vctest: unknown child mode %s\n", argv[2]);
		return 2;
	}
	if (t_harness_init() != 0) {
		fprintf(stderr, "vctest: cannot set up a temp dir\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int passed = 0, failed = 0;
	double start = now_s();
	printf("vctest (%s build), temp dir %s\n", t_sanitized() ? "sanitizer" : "plain", t_tmp());
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int wanted = argc < 2;
		for (int a = 1; a < argc && !wanted; a++)
			wanted = strcmp(argv[a], cases[i].name) == 0;
		if (!wanted)
			continue;
		char why[2048];
		double t0 = now_s();
		printf("RUN   %s\n", cases[i].name);
		cases[i].fn();
		double dt = now_s() - t0;
		if (t_harness_take_failure(why, sizeof(why))) {
			failed++;
			printf("FAIL  %s (%.1fs)\n      %s\n", cases[i].name, dt, why);
		} else {
			passed++;
			printf("PASS  %s (%.1fs)\n", cases[i].name, dt);
		}
	}
	printf("vctest done in %.1fs\n", now_s() - start);
	printf("%d passed, %d failed\n", passed, failed);
	if (!getenv("VCTEST_KEEP_TMP") && failed == 0) {
		char cmd[512];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", t_tmp());
		if (system(cmd) != 0)
			fprintf(stderr, "vctest: could not remove %s\n", t_tmp());
	}
	return failed ? 1 : 0;
}
