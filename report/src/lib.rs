//! Saved runs, rendered for people: tables, plots, and comparisons between two runs.
#![forbid(unsafe_code)]
