//! What a node's NICs and GPU links carry right now, read from sysfs and NVML.
#![forbid(unsafe_code)]
