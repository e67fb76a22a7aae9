"""The NVML-backed reference device plugin for NVIDIA GPUs (`dpconform nvml-plugin`).

Modules: backend (the one place the real/fake NVML is chosen), real_nvml / fake_nvml (the backends),
sysfs (NUMA from /sys), discovery, allocation (GetPreferredAllocation), health (XID events),
strategies (Allocate per deviceListStrategy), config, servicer, cli.
"""
