"""Session setup: one persistent XLA compilation cache shared by every test and every
run_lra.py subprocess they start (run_env copies os.environ). Most of the suite's time is XLA
compiling the same tiny models again in new processes; a cache hit is the same executable."""

import atexit
import os
import shutil
import sys
import tempfile

# submitit's import runs logging.config.dictConfig, which closes every handler already made; absl's
# handler, made when a test module imports absl during collection, writes to pytest's capture
# file of that moment, and closing it crashes pytest ('lost sys.stderr'). Imported first, it has
# no handler to close.
import submitit  # pylint: disable=unused-import

_CACHE_DIR = tempfile.mkdtemp(prefix='lra_luna_test_xla_cache_')
atexit.register(shutil.rmtree, _CACHE_DIR, ignore_errors=True)
os.environ.setdefault('JAX_COMPILATION_CACHE_DIR', _CACHE_DIR)
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0')  # every compile: 10% off
# The campaign's shared cache of step memory estimates: the session's own, not the user's.
os.environ.setdefault('LRA_CACHE_DIR', os.path.join(_CACHE_DIR, 'lra_luna'))
# The suite's XLA flags in every test process (tests/tiny.py says why); a user's own flags stay.
sys.path.insert(0, os.path.dirname(__file__))
import tiny  # noqa: E402  pylint: disable=wrong-import-position
if tiny.XLA_FLAGS not in os.environ.get('XLA_FLAGS', ''):  # xdist's workers inherit them
  os.environ['XLA_FLAGS'] = ' '.join(filter(None, (os.environ.get('XLA_FLAGS'), tiny.XLA_FLAGS)))


# The slow tier: tests that train, start processes or compile full-size steps (seconds to
# minutes each). `pytest -m "not slow"` leaves them out: the fast tier, every module in a few
# minutes; CI runs both. A module name alone marks the whole module.
SLOW = {
    'test_seed_stacking': None,
    'test_gpu_benchmark': {'test_the_cpu_dry_run_runs_every_part_and_a_rerun_skips_them'},
    'test_campaign': {'test_local_campaign_writes_the_report', 'test_status_lists_every_run',
                      'test_rerun_of_a_finished_campaign_has_nothing_to_do',
                      'test_killed_job_and_killed_driver_give_the_same_results',
                      'test_job_failing_twice_is_reported',
                      'test_slurm_rejection_is_slurms_own_message',
                      'test_slurm_campaign_survives_scancel',
                      'test_the_authors_grid_runs_each_task_with_its_own_head_on_the_paper_protocol',
                      'test_vmapped_step_estimate_grows_with_the_seeds',
                      'test_a_local_job_sees_its_gpu_by_the_users_name',
                      'test_the_first_steps_compile_in_parallel_with_progress_and_match_one_at_a_'
                      'time', 'test_the_mqar_grids_plan_a_group_per_model_and_cell',
                      'test_an_mqar_cells_job_plans_its_programs_against_the_device',
                      'test_a_campaign_with_cells_trains_each_cell_and_reports_them'},
    'test_accumulation': {'test_accumulated_step_equals_the_single_batch_step',
                          'test_accumulated_gradient_is_the_mean_of_the_micro_batches',
                          'test_float16_accumulated_step_with_loss_scaling_matches_the_single_'
                          'batch_step', 'test_accumulation_shrinks_the_compiled_step_memory'},
    'test_causal': {'test_lm_trains_on_a_repeated_sequence',
                    'test_chunked_memory_grows_linearly_and_beats_cumsum'},
    'test_layers': {'test_lean_blocks_keep_less_memory_than_plain_autodiff'},
    'test_models': {'test_last_layer_computes_only_the_rows_the_head_reads',
                    'test_padding_changes_no_real_output', 'test_bfloat16_trains_without_nan',
                    'test_bfloat16_close_to_float32'},
    'test_protocols': {'test_authors_retrieval_head_is_one_hidden_layer_on_second_then_first'},
    'test_install': {'test_run_lra_finds_configs_from_another_folder'},
    'test_train': None,
    'test_s4d': {'test_jit_equals_eager_and_bfloat16_runs', 'test_padding_changes_no_real_output',
                 'test_blocked_kernel_equals_every_power_taken_directly',
                 'test_ssm_parameters_get_their_own_rate_and_no_weight_decay'},
    'test_mega': {'test_jit_equals_eager_and_bfloat16_runs'},
    'test_s5': {'test_jit_equals_eager_and_every_dtype_keeps_a_float32_state',
                'test_padding_changes_no_real_output',
                'test_compiled_step_memory_grows_at_most_linearly',
                'test_scan_equals_the_step_by_step_recurrence_values_and_gradients',
                'test_sequential_scan_gives_the_same_model', 'test_causal_form_sees_no_future',
                'test_sequential_and_chunked_scans_give_the_same_model',
                'test_one_a_for_every_step_has_the_gradient_of_the_recurrence',
                'test_layer_equals_its_recurrence',
                'test_chunked_scan_equals_the_step_by_step_recurrence_values_and_gradients'},
    'test_lru': {'test_jit_equals_eager_and_every_dtype_keeps_a_float32_state',
                 'test_padding_changes_no_real_output',
                 'test_layer_equals_the_step_by_step_recurrence_values_and_gradients',
                 'test_gamma_normalises_the_state_and_every_parameter_is_stable'},
    'test_reformer': {'test_real_rows_do_not_depend_on_the_padded_length'},
    'test_registry': {'test_a_new_entry_reaches_every_tool'},
    'test_rotary': {'test_rotary_reaches_the_attention_of_every_model_that_takes_it'},
    'test_run_size': {'test_describe_reads_no_data_and_counts_parameters'},
    'test_output': {'test_tensorflow_start_up_lines_are_silenced',
                    'test_a_signal_stops_the_listops_generator_with_one_line'},
    'test_export': {'test_every_models_steps_export_for_cuda_and_tpu',
                    'test_quick_listops_runs_on_8_devices_with_eval_batch_250'},
    'test_precision': {'test_float16_model_is_finite_and_close_to_float32',
                       'test_float16_overflow_skips_the_update_and_is_counted',
                       'test_finite_float16_step_updates_and_matches_the_unscaled_gradient'},
    'test_tasks': {'test_quick_config_trains', 'test_paper_config_trains',
                   'test_import_lra_release_from_a_nested_tree',
                   'test_tensorflow_is_imported_only_when_a_tfds_task_loads'},
    'test_sweep': {'test_vmapped_seeds_match_seeds_run_alone'},
    'test_probe': {'test_probe_writes_its_files_and_the_full_window_is_the_full_input',
                   'test_hidden_tokens_are_exactly_padding',
                   'test_without_windows_the_probe_derives_them_prints_its_table_and_warns_when_'
                   'flat',
                   'test_a_sweep_folder_gets_one_figure_per_task', 'test_bad_input_is_one_line'},
    'test_predict': {'test_grayscale_equals_tensorflow_for_every_colour',
                     'test_evaluation_equals_the_training_run_for_each_checkpoint',
                     'test_evaluate_cli_prints_the_sections',
                     'test_a_workdir_without_checkpoints_is_refused_in_one_line',
                     'test_probabilities_are_the_restored_models_and_match_test_accuracy',
                     'test_predict_cli_without_tensorflow',
                     'test_a_missing_folder_or_a_sweep_root_is_named_as_such'},
    'test_plugins': {'test_example_trains_and_is_labelled_by_its_class',
                     'test_sweep_and_report_use_the_label', 'test_profiler_row_of_the_example'},
    'test_data_safety': {'test_outer_release_folder_is_refused_then_the_inner_one_trains_with_its_source',
                         'test_release_source_never_falls_back_to_generated'},
    'test_pretraining': {'test_results_have_a_pretraining_section_on_training_inputs_only',
                         'test_an_image_pretraining_step_trains_a_one_value_head_on_the_l1_loss',
                         'test_causal_encoder_gradient_from_the_future_is_exactly_zero',
                         'test_fine_tuning_starts_from_exactly_the_pretrained_encoder_and_a_'
                         'fresh_head',
                         'test_a_signal_in_pretraining_names_the_phase_and_resumes_exactly',
                         'test_a_kill_in_fine_tuning_resumes_without_pretraining_again',
                         'test_fine_tuning_from_another_runs_pretraining',
                         'test_each_process_of_a_sequential_sweep_fine_tunes_the_one_pretraining',
                         'test_a_pretraining_of_another_vocabulary_is_refused_before_training',
                         'test_evaluate_and_predict_read_an_spt_run_as_any_other'},
    'test_profile': {'test_profiler_runs_end_to_end_and_writes_every_output',
                     'test_memory_only_compiles_without_running_and_gives_the_same_estimates',
                     'test_out_of_memory_point_is_recorded_and_the_sweep_goes_on',
                     'test_luna_memory_grows_linearly_and_the_transformers_faster',
                     'test_block_sparse_memory_grows_linearly',
                     'test_a_point_too_big_for_the_host_is_skipped_before_it_runs',
                     'test_flops_only_counts_the_lowered_step_without_compiling',
                     'test_an_isolated_point_runs_in_a_worker_with_the_same_estimate'},
}


def pytest_collection_modifyitems(items):
  import pytest
  for item in items:
    module = item.module.__name__.rpartition('.')[2]
    if module in SLOW and (SLOW[module] is None or item.originalname in SLOW[module]):
      item.add_marker(pytest.mark.slow)
