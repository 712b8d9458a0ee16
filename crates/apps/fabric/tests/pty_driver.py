#!/usr/bin/env python3
"""Drives a command on a pseudo-terminal step by step, as a person would (the `fabric chat`
tests, issue #42).

Reads one JSON object on stdin: {"argv": [...], "steps": [...], "exit_within": seconds}.
Each step is {"expect": TEXT, "timeout": seconds} (waits until TEXT appears in what the
terminal shows after the previous expectation), {"send": TEXT} (typed), or {"sleep":
seconds}. Like a real terminal it answers the cursor position request (ESC [ 6 n). Prints
one JSON object: {"code": exit code or null, "output": all the terminal showed, "failed":
why a step failed, or null}.
"""
import json
import os
import pty
import select
import struct
import sys
import termios
import fcntl
import time


class Terminal:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.environ["TERM"] = "xterm"
            os.execvp(argv[0], argv)
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.out = bytearray()
        self.seen = 0
        self.open = True

    def read(self, timeout):
        """Reads what is there within `timeout`; False once the terminal closed."""
        if not self.open:
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:
            data = b""
        if not data:
            self.open = False
            return False
        for _ in range(data.count(b"\x1b[6n")):
            os.write(self.fd, b"\x1b[1;1R")
        self.out.extend(data)
        return True

    def expect(self, text, timeout):
        needle = text.encode()
        deadline = time.time() + timeout
        while True:
            at = self.out.find(needle, self.seen)
            if at >= 0:
                self.seen = at + len(needle)
                return None
            if time.time() > deadline:
                return "`%s` did not show within %ss" % (text, timeout)
            if not self.read(0.05):
                return "the terminal closed before `%s` showed" % text

    def finish(self, within):
        deadline = time.time() + within
        while self.read(0.05) and time.time() < deadline:
            pass
        code = None
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                code = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.05)
        if code is None:
            os.kill(self.pid, 9)
            os.waitpid(self.pid, 0)
        return code


def main():
    spec = json.load(sys.stdin)
    term = Terminal(spec["argv"])
    failed = None
    for step in spec["steps"]:
        if "send" in step:
            os.write(term.fd, step["send"].encode())
        elif "expect" in step:
            failed = term.expect(step["expect"], step.get("timeout", 30))
        elif "sleep" in step:
            deadline = time.time() + step["sleep"]
            while time.time() < deadline and term.read(0.05):
                pass
        if failed:
            break
    code = term.finish(spec.get("exit_within", 30))
    output = term.out.decode("utf-8", errors="replace")
    json.dump({"code": code, "output": output, "failed": failed}, sys.stdout)


if __name__ == "__main__":
    main()
