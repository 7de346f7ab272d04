"""Schedulers: the learned TapFinger policy and the baselines it is compared against."""
