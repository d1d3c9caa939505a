"""NumPy kernels: conversion family."""

from __future__ import annotations
