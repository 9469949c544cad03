#!/usr/bin/env python3
"""Fails when the modules of src/ depend on each other in a cycle (make lint runs it).

A module's dependencies are the `crate::...` and `super::...` paths in its code (comments left
out), resolved to the longest module prefix. A module may use its own submodules and its parent
(`pool::worker` reports to `pool`): those edges do not count. Prints each cycle with its edges.
"""
import os
import re
import sys
root='src'
mods={}
for dp,dn,fn in os.walk(root):
    for f in fn:
        if not f.endswith('.rs'): continue
        p=os.path.join(dp,f); rel=p[len(root)+1:-3]
        parts=rel.split('/')
        if parts[-1]=='mod': parts=parts[:-1]
        if parts==['lib']: parts=[]
        mods['::'.join(parts)]=open(p).read()
def resolve(path):
    # longest module prefix
    segs=path.split('::')
    for k in range(len(segs),0,-1):
        m='::'.join(segs[:k])
        if m in mods: return m
    return None
edges={m:set() for m in mods}
for m,src in mods.items():
    src=re.sub(r'//[^\n]*','',src)
    for mm in re.finditer(r'crate::([a-z_][a-z_0-9]*(?:::[a-z_][a-z_0-9]*)*)',src):
        t=resolve(mm.group(1))
        if t and t!=m and not t.startswith(m+'::') and not m.startswith(t+'::'): edges[m].add(t)
    # use super::
    for mm in re.finditer(r'\bsuper::([a-z_][a-z_0-9]*)',src):
        parent='::'.join(m.split('::')[:-1]); t=resolve((parent+'::' if parent else '')+mm.group(1))
        if t and t!=m and not m.startswith(t+'::') : edges[m].add(t)
# cycles via Tarjan
idx={};low={};st=[];on=set();out=[];c=[0]
sys.setrecursionlimit(10000)
def sc(v):
    idx[v]=low[v]=c[0];c[0]+=1;st.append(v);on.add(v)
    for w in edges[v]:
        if w not in idx: sc(w);low[v]=min(low[v],low[w])
        elif w in on: low[v]=min(low[v],idx[w])
    if low[v]==idx[v]:
        comp=[]
        while True:
            w=st.pop();on.discard(w);comp.append(w)
            if w==v: break
        if len(comp)>1: out.append(sorted(comp))
for v in mods:
    if v not in idx: sc(v)
for comp in out: print("cycle:",comp, {a:sorted(edges[a]&set(comp)) for a in comp})
print("module-cycles: %d modules, %d cycles" % (len(mods), len(out)))
sys.exit(1 if out else 0)
