#!/usr/bin/env python3
"""Issue #39 (ADR-095): what a command's UNIX socket pairs cost the host, against what its
v1 memory cgroup charges. Run as root on a cgroup v1 host:

    memcg-socket-probe.py WORKERS PAIRS FILL [LIMIT_BYTES] [kmem=BYTES ...]

FILL: none (empty pairs), full (64 KiB sends until each pair's buffer is full), full:SIZE
(sends of SIZE bytes), small (1-byte sends). NS=<clone flags> makes the workers' parent
unshare those namespaces first (0x60028000 for mount, IPC, network and PID).

Makes a child of this process's memory cgroup as cgroup.rs does (memory, memsw and kmem.tcp
limits), forks WORKERS workers into it, samples /proc/meminfo and /proc/zoneinfo every 20 ms
and prints: the peak MemAvailable fall, the peak rise of the kernel memory held (MemTotal -
MemFree - Buffers - Cached - AnonPages - SReclaimable), the same less the per-CPU free lists,
the cgroup's charge and OOM kills, and the slab caches that grew.
"""
import os, sys, socket, time, json

MEM = '/sys/fs/cgroup/memory' + open('/proc/self/cgroup').read().split('memory:')[1].split('\n')[0]
workers = int(sys.argv[1]); pairs = int(sys.argv[2]); fill = sys.argv[3]
limit = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 30
extra = sys.argv[5:]  # e.g. kmem=NNN

def pcp():
    return sum(int(l.split()[1]) for l in open('/proc/zoneinfo') if l.strip().startswith('count:')) * 4096

def meminfo():
    d = {'pcp': pcp()}
    for l in open('/proc/meminfo'):
        k, v = l.split(':'); d[k] = int(v.split()[0]) * 1024
    return d

def slabs():
    d = {}
    for l in open('/proc/slabinfo').readlines()[2:]:
        f = l.split()
        d[f[0]] = int(f[2]) * int(f[3])  # num_objs * objsize
    return d

def rd(cg, f):
    try: return int(open(os.path.join(cg, f)).read().split()[0])
    except Exception as e: return str(e)

cg = os.path.join(MEM, 'kmem-repro-%d' % os.getpid())
os.mkdir(cg)
def w(f, v):
    try:
        open(os.path.join(cg, f), 'w').write(str(v)); return 'ok'
    except OSError as e: return 'ERR ' + str(e)
print('limit', w('memory.limit_in_bytes', limit), 'memsw', w('memory.memsw.limit_in_bytes', limit), 'tcp', w('memory.kmem.tcp.limit_in_bytes', limit))
for e in extra:
    k, v = e.split('='); print(k, w('memory.' + k + '.limit_in_bytes' if k != 'raw' else v.split(':')[0], v.split(':')[-1]))

import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (4096, 4096))
m0 = meminfo(); s0 = slabs()
r, wp = os.pipe(); go_r, go_w = os.pipe()
kids = []
NS = int(os.environ.get('NS', '0'), 0)
cmdr = os.fork()
if cmdr == 0:
    os.close(go_w)
    open(os.path.join(cg, 'cgroup.procs'), 'w').write('0')
    if NS:
        import ctypes
        lc = ctypes.CDLL(None, use_errno=True)
        assert lc.unshare(NS) == 0, ctypes.get_errno()
        if NS & 0x20000000 and os.fork():  # NEWPID: the first child is init
            os.wait(); os._exit(0)
    for k in range(workers):
        pid = os.fork()
        if pid == 0: break
        kids.append(pid)
    else:
        for p in kids: os.waitpid(p, 0)
        os._exit(0)
    if True:
        os.close(r)
        total = 0; keep = []; err = ''
        try:
            for i in range(pairs):
                a, b = socket.socketpair()
                keep.append((a, b))
                if fill.startswith('full'):
                    a.setblocking(False)
                    sz = int(fill[5:] or 65536)
                    try:
                        while True: total += a.send(b'x' * sz)
                    except BlockingIOError: pass
                elif fill == 'small':  # many tiny skbs
                    a.setblocking(False)
                    try:
                        while True: total += a.send(b'x')
                    except BlockingIOError: pass
        except OSError as e: err = str(e)
        os.write(wp, (json.dumps([len(keep), total, err]) + '\n').encode())
        os.read(go_r, 1)  # wait until parent measured
        os._exit(0)
kids = [cmdr]
os.close(wp)
data = b''
import select
peak = [0, 0, 0]
K = lambda m: m['MemTotal'] - m['MemFree'] - m['Buffers'] - m['Cached'] - m['AnonPages'] - m['SReclaimable']
deadline = time.time() + 60
while data.count(b'\n') < workers and time.time() < deadline:
    mi = meminfo(); ma = mi['MemAvailable']; peak[0] = max(peak[0], m0['MemAvailable'] - ma); peak[1] = max(peak[1], K(mi) - K(m0)); peak[2] = max(peak[2], K(mi) - mi['pcp'] - K(m0) + m0['pcp'])
    if not select.select([r], [], [], 0.02)[0]: continue
    c = os.read(r, 65536)
    if not c: break
    data += c
time.sleep(0.5)
m1 = meminfo(); s1 = slabs()
res = [json.loads(x) for x in data.split(b'\n') if x]
alive = 0
for p in kids:
    try: os.kill(p, 0); alive += 1
    except OSError: pass
MiB = 1 << 20
print('workers', workers, 'pairs/worker', pairs, 'fill', fill, 'pairs made', sum(x[0] for x in res), 'queued MiB', sum(x[1] for x in res) // MiB, 'errs', set(x[2] for x in res), 'alive', alive)
print('peak drop MiB', peak[0] >> 20, 'peak kernel MiB', peak[1] >> 20, 'peak kernel minus pcp', peak[2] >> 20, 'pcp now', (m1['pcp'] - m0['pcp']) >> 20, 'end kernel', (K(m1) - K(m0)) >> 20, 'MemAvailable drop MiB', (m0['MemAvailable'] - m1['MemAvailable']) // MiB, 'MemFree drop', (m0['MemFree'] - m1['MemFree']) // MiB,
      'Slab drop', (m1['Slab'] - m0['Slab']) // MiB, 'SUnreclaim', (m1['SUnreclaim'] - m0['SUnreclaim']) // MiB, 'PageTables', (m1['PageTables'] - m0['PageTables']) // MiB,
      'KernelStack', (m1['KernelStack'] - m0['KernelStack']) // MiB)
print('cgroup usage MiB', rd(cg, 'memory.usage_in_bytes') // MiB, 'max', rd(cg, 'memory.max_usage_in_bytes') // MiB, 'kmem', rd(cg, 'memory.kmem.usage_in_bytes') // MiB, 'tcp', rd(cg, 'memory.kmem.tcp.usage_in_bytes'), 'failcnt', rd(cg, 'memory.failcnt'))
print('oom', open(os.path.join(cg, 'memory.oom_control')).read().replace('\n', ' '))
st = dict(l.split() for l in open(os.path.join(cg, 'memory.stat')))
print('stat', {k: int(v) // MiB for k, v in st.items() if not k.startswith('total_') and int(v) > MiB})
d = sorted(((s1.get(k, 0) - s0.get(k, 0)), k) for k in s1)
print('slab deltas MiB', [(k, v // MiB) for v, k in d[::-1][:8] if v > MiB])
try:
    print('kmem.slabinfo', open(os.path.join(cg, 'memory.kmem.slabinfo')).read()[:1500])
except OSError as e: print('kmem.slabinfo', e)
os.close(go_w)
for p in kids:
    try: os.waitpid(p, 0)
    except ChildProcessError: pass
for t in (0, 1, 3):
    time.sleep(t); print('after reap +%ds kernel MiB' % t, (K(meminfo()) - K(m0)) >> 20, 'usage', rd(cg, 'memory.usage_in_bytes') >> 20)
os.rmdir(cg)
