"""`python -m lra_luna.profile`: the sweep's command line (lra_luna/profile/sweep.py)."""

from lra_luna.profile import sweep

if __name__ == '__main__':
  sweep.cli_main()
