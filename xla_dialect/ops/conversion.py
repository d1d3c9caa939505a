"""hlo ops: conversion family."""

from __future__ import annotations

OPS: list = []


class ConversionBuilder:
    """Builder methods of the conversion family."""
