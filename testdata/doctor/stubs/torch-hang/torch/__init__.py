"""Stub torch for qwenref doctor's tests: importing it never returns (a hung driver)."""
import time

time.sleep(3600)
