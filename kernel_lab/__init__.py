"""The kernel lab: the research behind ``mla_edu.kernels``' fast paths (kernel_lab/README.md)."""
