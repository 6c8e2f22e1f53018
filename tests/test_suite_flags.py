"""The suite's own XLA flags (tests/tiny.py): a flag goes in only where this XLA knows it, since
an unknown one aborts every process that compiles."""

import tiny


def test_the_probe_accepts_a_known_flag_and_refuses_an_unknown_one():
  assert tiny.xla_accepts('--xla_backend_optimization_level=0')
  assert not tiny.xla_accepts('--xla_cpu_no_such_flag_of_the_tests=false')


def test_the_suite_flags_hold_the_emitter_flag_exactly_where_xla_knows_it():
  flags = tiny.XLA_FLAGS.split()
  assert '--xla_backend_optimization_level=0' in flags
  assert (tiny.LOOP_EMITTERS in flags) == tiny.xla_accepts(tiny.LOOP_EMITTERS)
