"""The CPU host settings (glibc never-trim, synchronous dispatch) go only where JAX will run on
the CPU, and the platform is decided without starting a backend."""

import jax
import pytest

from lra_luna.training import host_memory
from lra_luna.training import steps


@pytest.mark.parametrize('jax_platforms, platform', [
    ('cpu', 'cpu'), ('cuda', 'gpu'), ('cuda,cpu', 'gpu'), ('rocm', 'gpu'), ('tpu,cpu', 'tpu'),
    (' CPU ', 'cpu')])
def test_the_platform_is_the_first_one_jax_platforms_names(jax_platforms, platform):
  assert host_memory.planned_platform(jax_platforms) == platform


def test_unset_platforms_are_cpu_only_where_no_accelerator_back_end_is_installed(monkeypatch):
  monkeypatch.setattr(host_memory, 'accelerator_plugins', lambda: [])
  assert host_memory.planned_platform(None) == 'cpu'
  assert host_memory.planned_platform('') == 'cpu'
  monkeypatch.setattr(host_memory, 'accelerator_plugins', lambda: ['xla_cuda12'])
  assert host_memory.planned_platform(None) == 'accelerator'


def test_libtpu_counts_as_an_accelerator_back_end(monkeypatch):
  monkeypatch.setenv('TPU_LIBRARY_PATH', '/opt/libtpu.so')
  assert 'libtpu' in host_memory.accelerator_plugins()


@pytest.fixture
def host_settings(monkeypatch):
  """Records what reuse_freed_host_memory sets (the allocator call, jax.config updates) instead
  of setting it."""
  calls = []
  monkeypatch.setattr(host_memory, 'keep_freed_blocks_in_heap',
                      lambda: calls.append('keep_freed_blocks_in_heap'))
  monkeypatch.setattr(jax.config, 'update', lambda name, value: calls.append((name, value)))
  return calls


@pytest.mark.parametrize('platform', ['gpu', 'tpu', 'accelerator'])
def test_nothing_changes_off_the_cpu(monkeypatch, host_settings, platform):
  monkeypatch.setattr(host_memory, 'planned_platform', lambda _: platform)
  assert steps.reuse_freed_host_memory() is False
  assert host_settings == []


def test_on_the_cpu_the_heap_keeps_freed_blocks_and_dispatch_is_synchronous(monkeypatch,
                                                                           host_settings):
  monkeypatch.setattr(host_memory, 'planned_platform', lambda _: 'cpu')
  assert steps.reuse_freed_host_memory() is True
  assert host_settings == [('jax_cpu_enable_async_dispatch', False), 'keep_freed_blocks_in_heap']


def test_the_platform_is_read_from_jax_config(monkeypatch, host_settings):
  """JAX_PLATFORMS reaches reuse_freed_host_memory through jax.config.jax_platforms."""
  seen = []
  monkeypatch.setattr(host_memory, 'planned_platform', lambda value: seen.append(value) or 'gpu')
  steps.reuse_freed_host_memory()
  assert seen == [jax.config.jax_platforms]
