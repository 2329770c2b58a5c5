"""DIR/report.html: one self-contained file (inline SVG drawn by inline JS, no network).

One chart per step series (loss scale on a log axis, the unscaled gradient norm, the step
time, peak memory), every rank a line of its own, all sharing one step axis: ticks and
gridlines on both axes, skipped steps marked on every chart (and as dots on the loss scale),
a dashed marker with its code wherever a finding happened, and on hover (or at `#step-N`,
where a finding's link goes) a crosshair on every chart with each rank's values at that step.
A series with no value says why. The header's numbers are the summary's
(`findings.run_numbers`), so the page, the stderr summary and AMP701 count the same way.

Hand-written SVG rather than a plotting library: the page stays one small file that
any browser draws offline, and the test reads what was drawn from the DOM (markers,
ticks, the hover values), not from pixels alone. Long runs are drawn with one min/max
pair per pixel column, so a 300,000-step run draws as many path points as a 1,000-step one.

Everything from the watched program (file names, module names, messages) reaches the
page only as JSON data inserted with `textContent`, never as markup (`code` spans in a
message become <code> elements holding text); the JSON is escaped so it cannot close its
<script> element.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional

from .findings import fmt_scale, run_numbers, steps_by_rank, when

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>amplint run report</title>
<style>
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#1f2937;background:#f8fafc}
main{max-width:1040px;margin:0 auto;padding:24px}
h1{font-size:20px;margin:0 0 4px}h2{font-size:15px;margin:0 0 6px;font-weight:600}
.meta{color:#4b5563;margin:2px 0}.numbers{display:flex;flex-wrap:wrap;gap:8px;margin:12px 0 18px}
.num{background:#fff;border:1px solid #e5e7eb;border-radius:6px;padding:6px 12px}.num b{display:block;font-size:18px}
.num.bad b{color:#b91c1c}.card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 14px;margin:0 0 14px}
.legend{font-size:12px;color:#4b5563;margin:0 0 4px}.legend span{margin-right:14px;white-space:nowrap}
.swatch{display:inline-block;width:18px;height:3px;vertical-align:middle;margin-right:4px}
svg.chart{display:block;width:100%;height:auto;overflow:visible}
.grid{stroke:#eef0f3;stroke-width:1}.axis{stroke:#9ca3af;stroke-width:1}
.tick{font-size:11px;fill:#6b7280}.title{font-size:11px;fill:#374151}
.series{fill:none;stroke-width:1.6;stroke-linejoin:round}
.skip{stroke:#dc2626;stroke-width:1.5}.skipped{fill:#dc2626;stroke:#fff;stroke-width:.8}
.finding-mark{stroke:#d97706;stroke-width:1.2;stroke-dasharray:4 3}.finding-code{font-size:10px;fill:#b45309}
.cursor{stroke:#111827;stroke-width:1;opacity:.55}.marker{stroke:#f59e0b;stroke-width:2}
.hit{fill:transparent;cursor:crosshair}.dot{stroke:#fff;stroke-width:1}
.empty{color:#6b7280;font-style:italic;margin:4px 0}.gap{color:#6b7280;font-size:12px;margin:4px 0 0}
#tip{position:fixed;pointer-events:none;background:#111827;color:#f9fafb;font-size:12px;border-radius:6px;
 padding:6px 9px;display:none;max-width:360px;z-index:2;line-height:1.35;box-shadow:0 2px 8px rgba(0,0,0,.25)}
#tip .skipped-note{color:#fca5a5}#tip .code{color:#fcd34d}#tip code{background:#374151;color:#f9fafb}
ul{padding-left:20px;margin:6px 0}li{margin:4px 0}code{background:#f3f4f6;padding:0 3px;border-radius:3px;font-size:13px}
a{color:#2563eb}.where{color:#4b5563}
</style></head><body><main>
<h1 id="title">amplint run report</h1>
<p class="meta" id="meta"></p>
<div class="numbers" id="numbers"></div>
<div id="charts"></div>
<div class="card"><h2>Findings</h2><ul id="findings"></ul></div>
<div class="card"><h2>Non-finite sources and incidents</h2><ul id="notes"></ul></div>
</main><div id="tip" role="tooltip"></div>
<script type="application/json" id="data">__DATA__</script>
<script>
(function(){
var D=JSON.parse(document.getElementById('data').textContent);
var NS='http://www.w3.org/2000/svg',W=1000,H=230,L=72,R=14,T=16,B=34,PW=W-L-R,PH=H-T-B;
var COLORS=['#2563eb','#16a34a','#9333ea','#ea580c','#0891b2','#be123c','#4d7c0f','#a16207'];
function el(n,a,p){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);if(p)p.appendChild(e);return e;}
function txt(tag,s,p,cls){var e=document.createElement(tag);e.textContent=s;if(cls)e.className=cls;if(p)p.appendChild(e);return e;}
function rich(s,p){var parts=String(s==null?'':s).split('`');if(parts.length%2===0){parts[parts.length-2]+='`'+parts.pop();}
 parts.forEach(function(part,i){if(i%2)txt('code',part,p);else if(part)p.appendChild(document.createTextNode(part));});return p;}
function color(i){return COLORS[i%COLORS.length];}
function g6(v){if(v===0)return '0';var e=Math.floor(Math.log(Math.abs(v))/Math.LN10+1e-12);
 if(e<-4||e>=6){var m=v.toExponential(5).split('e'),x=+m[1];return String(+m[0])+'e'+(x<0?'-':'+')+(Math.abs(x)<10?'0':'')+Math.abs(x);}
 return String(+v.toPrecision(6));}
function fmt(v,unit){if(v==null)return 'n/a';if(unit==='ms')return +(v*1000).toPrecision(3)+' ms';if(unit==='MB')return (v/1048576).toFixed(1)+' MB';return g6(v);}
function tickText(v,unit){if(unit==='ms')return +(v*1000).toPrecision(3)+'';if(unit==='MB')return +(v/1048576).toPrecision(3)+'';
 var a=Math.abs(v);if(a!==0&&(a>=1e7||a<1e-4))return v.toExponential(1);return a>=1&&v===Math.round(v)?String(v):String(+v.toPrecision(3));}
function niceStep(span,n){var raw=span/Math.max(n,1),mag=Math.pow(10,Math.floor(Math.log(raw)/Math.LN10)),r=raw/mag;
 return (r<=1?1:r<=2?2:r<=5?5:10)*mag;}
function linTicks(lo,hi,n){var s=niceStep(hi-lo,n),out=[];for(var v=Math.ceil(lo/s)*s;v<=hi+s*1e-9;v+=s)out.push(+v.toPrecision(12));return out;}
function logTicks(lo,hi,base){var e0=Math.floor(Math.log(lo)/Math.log(base)),e1=Math.ceil(Math.log(hi)/Math.log(base)),k=Math.max(1,Math.ceil((e1-e0)/6)),out=[];
 for(var e=e0;e<=e1;e+=k){var v=Math.pow(base,e);if(v>=lo*(1-1e-9)&&v<=hi*(1+1e-9))out.push(v);}if(!out.length)out.push(lo,hi);return out;}
var h=D.header||{},ranks=D.ranks||[];
if(D.program)document.getElementById('title').textContent='amplint run report: '+D.program;
document.getElementById('meta').textContent='torch '+(h.torch||'?')+' \\u00b7 CUDA '+(h.cuda||'none')+' \\u00b7 device '+(h.device||'?')+
 (h.capability?' (capability '+h.capability+')':'')+' \\u00b7 autocast '+(h.autocast_dtype||'none')+(ranks.length>1?' \\u00b7 '+ranks.length+' ranks':'');
var nums=document.getElementById('numbers');
function num(label,value,bad){var d=txt('div','',nums,'num'+(bad?' bad':''));txt('b',value,d);d.appendChild(document.createTextNode(label));}
(D.numbers||[]).forEach(function(n){var who=ranks.length>1?' (rank '+n.rank+')':'';
 num('optimizer steps'+who,String(n.steps));num('skipped'+who,n.skipped+(n.steps?' ('+Math.round(100*n.skipped/n.steps)+'%)':''),n.skipped>0);
 if(n.scale_from!=null)num('loss scale'+who,n.scale_text,n.scale_to<n.scale_from);});
num('findings',String(D.findings.length),D.findings.length>0);
var x0=Infinity,x1=-Infinity;ranks.forEach(function(r){if(r.step.length){x0=Math.min(x0,r.step[0]);x1=Math.max(x1,r.step[r.step.length-1]);}});
if(!isFinite(x0)){x0=0;x1=1;}if(x1===x0)x1=x0+1;
function X(s){return L+(s-x0)/(x1-x0)*PW;}
var charts=[],tip=document.getElementById('tip');
var SPECS=[{key:'scale',title:'Loss scale',axis:'scale (log\\u2082)',log:2},{key:'norm',title:'Unscaled gradient norm',axis:'norm',log:'auto'},
 {key:'time',title:'Step time',axis:'ms',unit:'ms'},{key:'mem',title:'Peak memory',axis:'MB',unit:'MB'}];
var box=document.getElementById('charts');
SPECS.forEach(function(spec){
 var card=txt('div','',box,'card');card.id='chart-'+spec.key;txt('h2',spec.title,card);
 var vals=[];ranks.forEach(function(r){(spec.key==='scale'?r.scale.concat(r.scale_before):r[spec.key]).forEach(function(v){if(typeof v==='number'&&isFinite(v)&&(!spec.log||v>0))vals.push(v);});});
 if(!vals.length){txt('p','no data: '+((D.reasons||{})[spec.key]||'the run recorded no value'),card,'empty');return;}
 if(ranks.length>1){var lg=txt('div','',card,'legend');ranks.forEach(function(r,i){var s=txt('span','',lg);var sw=txt('span','',s,'swatch');sw.style.background=color(i);s.appendChild(document.createTextNode('rank '+r.rank));});}
 var lo=Math.min.apply(null,vals),hi=Math.max.apply(null,vals),base=spec.log==='auto'?(hi/lo>1000?10:0):spec.log;
 var f,inv,yt;
 if(base){f=function(v){return Math.log(v)/Math.log(base);};if(hi===lo){lo/=base;hi*=base;}yt=logTicks(lo,hi,base);}
 else{f=function(v){return v;};if(hi===lo){lo=lo>0?0:lo-1;hi=hi+(hi===0?1:Math.abs(hi)*0.1);}else{var pad=(hi-lo)*0.06;lo=lo>=0&&lo-pad<0?0:lo-pad;hi+=pad;}yt=linTicks(lo,hi,5);}
 var f0=f(lo),f1=f(hi);if(f1===f0)f1=f0+1;if(base){var padl=(f1-f0)*0.05;f0-=padl;f1+=padl;}
 function Y(v){return T+PH-(f(v)-f0)/(f1-f0)*PH;}
 var svg=el('svg',{viewBox:'0 0 '+W+' '+H,'class':'chart','data-key':spec.key,role:'img','aria-label':spec.title},card);
 yt.forEach(function(v){var y=Y(v);el('line',{x1:L,y1:y,x2:W-R,y2:y,'class':'grid'},svg);
  el('text',{x:L-6,y:y+4,'text-anchor':'end','class':'tick','data-axis':'y'},svg).textContent=tickText(v,spec.unit);});
 var xt=linTicks(x0,x1,8).filter(function(v){return v===Math.round(v);});
 xt.forEach(function(v){var x=X(v);el('line',{x1:x,y1:T,x2:x,y2:T+PH,'class':'grid'},svg);
  el('text',{x:x,y:T+PH+15,'text-anchor':'middle','class':'tick','data-axis':'x'},svg).textContent=String(v);});
 el('line',{x1:L,y1:T+PH,x2:W-R,y2:T+PH,'class':'axis'},svg);el('line',{x1:L,y1:T,x2:L,y2:T+PH,'class':'axis'},svg);
 el('text',{x:W-R,y:H-3,'text-anchor':'end','class':'title'},svg).textContent='optimizer step';
 el('text',{x:12,y:T+PH/2,'text-anchor':'middle','class':'title',transform:'rotate(-90 12 '+(T+PH/2)+')'},svg).textContent=spec.axis;
 ranks.forEach(function(r,i){
  var ys=r[spec.key],cols={},order=[];
  for(var j=0;j<r.step.length;j++){var v=ys[j];if(typeof v!=='number'||!isFinite(v)||(spec.log&&v<=0)){order.push(null);continue;}
   var c=Math.round(X(r.step[j]));var b=cols[c];if(!b){b=cols[c]={x:c,first:v,last:v,min:v,max:v};order.push(b);}else{b.last=v;b.min=Math.min(b.min,v);b.max=Math.max(b.max,v);}}
  var d='',run=[],lone=[];
  function end(){if(run.length===1)lone.push(run[0]);run=[];}
  order.forEach(function(b){if(b===null){end();return;}
   var pts=b.min===b.max?[b.first]:[b.first,b.min,b.max,b.last];
   pts.forEach(function(v){d+=(run.length?'L':'M')+b.x+' '+Y(v).toFixed(1);run.push([b.x,v]);});});end();
  el('path',{d:d,'class':'series','data-rank':r.rank,stroke:color(i)},svg);
  lone.forEach(function(p){el('circle',{cx:p[0],cy:Y(p[1]).toFixed(1),r:2,fill:color(i),'class':'point','data-rank':r.rank},svg);});
 });
 ranks.forEach(function(r){for(var j=0;j<r.step.length;j++){if(!r.skipped[j])continue;var x=X(r.step[j]).toFixed(1);
  el('line',{x1:x,y1:T+PH-6,x2:x,y2:T+PH,'class':'skip','data-step':r.step[j],'data-rank':r.rank},svg);
  if(spec.key==='scale'){var sv=r.scale_before[j]!=null?r.scale_before[j]:r.scale[j];if(typeof sv==='number'&&sv>0){
   var c=el('circle',{cx:x,cy:Y(sv).toFixed(1),r:3,'class':'skipped','data-step':r.step[j],'data-rank':r.rank},svg);
   el('title',{},c).textContent='step '+r.step[j]+' skipped at scale '+fmt(sv);}}}});
 D.findings.forEach(function(fd){var s=Math.min(Math.max(fd.step,x0),x1),x=X(s).toFixed(1);
  var g=el('g',{'class':'finding','data-step':fd.step,'data-code':fd.code},svg);
  var right=+x>W-R-60;el('line',{x1:x,y1:T,x2:x,y2:T+PH,'class':'finding-mark'},g);
  el('text',{x:right?+x-3:+x+3,y:T+9,'text-anchor':right?'end':'start','class':'finding-code'},g).textContent=fd.code;});
 var cur=el('line',{x1:-10,y1:T,x2:-10,y2:T+PH,'class':'cursor'},svg),dots=el('g',{},svg);
 var hit=el('rect',{x:L,y:T,width:PW,height:PH,'class':'hit'},svg);
 var chart={spec:spec,svg:svg,Y:Y,cur:cur,dots:dots};charts.push(chart);
 hit.addEventListener('mousemove',function(e){var rect=svg.getBoundingClientRect(),sx=(e.clientX-rect.left)/rect.width*W;
  show(Math.round(x0+(sx-L)/PW*(x1-x0)),e.clientX,e.clientY);});
 hit.addEventListener('mouseleave',hide);
 var miss=0,skippedMiss=0;ranks.forEach(function(r){r[spec.key].forEach(function(v,j){if(v==null){miss++;if(r.skipped[j])skippedMiss++;}});});
 var gap=(D.gaps||{})[spec.key];if(miss&&gap)txt('p',miss+' of '+ranks.reduce(function(a,r){return a+r.step.length;},0)+' steps have no value: '+gap,card,'gap');
});
function at(r,s){var lo=0,hi=r.step.length-1;if(hi<0)return -1;while(lo<hi){var m=(lo+hi)>>1;if(r.step[m]<s)lo=m+1;else hi=m;}
 if(lo>0&&Math.abs(r.step[lo-1]-s)<Math.abs(r.step[lo]-s))lo--;return lo;}
function show(s,cx,cy){s=Math.min(Math.max(s,x0),x1);tip.textContent='';var head=txt('div','step '+s,tip);head.style.fontWeight='600';
 var any=false;
 ranks.forEach(function(r,i){var j=at(r,s);if(j<0||r.step[j]!==s)return;any=true;var who=ranks.length>1?'rank '+r.rank+': ':'';
  if(r.skipped[j])txt('div',who+'skipped (inf/NaN gradients; the scale halved)',tip,'skipped-note');
  var parts=[];charts.forEach(function(c){var v=fmt(r[c.spec.key][j],c.spec.unit),b=c.spec.key==='scale'?r.scale_before[j]:null;
   if(b!=null&&b!==r.scale[j])v=fmt(b)+' \\u2192 '+v;parts.push(c.spec.title.toLowerCase()+' '+v);});
  txt('div',who+parts.join(' \\u00b7 '),tip);});
 if(!any)txt('div','no step recorded here',tip);
 D.findings.forEach(function(fd){if(fd.step===s){var d=txt('div','',tip);txt('span',fd.code+' ',d,'code');rich(fd.message,d);}});
 charts.forEach(function(c){var x=X(s);c.cur.setAttribute('x1',x);c.cur.setAttribute('x2',x);while(c.dots.firstChild)c.dots.removeChild(c.dots.firstChild);
  ranks.forEach(function(r,i){var j=at(r,s);var v=j>=0&&r.step[j]===s?r[c.spec.key][j]:null;if(typeof v==='number'&&isFinite(v)&&(!c.spec.log||v>0))
   el('circle',{cx:x,cy:c.Y(v).toFixed(1),r:3.5,fill:color(i),'class':'dot'},c.dots);});});
 tip.style.display='block';var tx=Math.min(cx+14,window.innerWidth-tip.offsetWidth-8),ty=Math.min(cy+14,window.innerHeight-tip.offsetHeight-8);
 tip.style.left=Math.max(4,tx)+'px';tip.style.top=Math.max(4,ty)+'px';tip.setAttribute('data-step',s);}
function hide(){tip.style.display='none';charts.forEach(function(c){c.cur.setAttribute('x1',-10);c.cur.setAttribute('x2',-10);while(c.dots.firstChild)c.dots.removeChild(c.dots.firstChild);});}
function mark(step){charts.forEach(function(c){var old=c.svg.querySelector('.marker');if(old)old.remove();var x=X(Math.min(Math.max(step,x0),x1));
 el('line',{x1:x,y1:T,x2:x,y2:T+PH,'class':'marker','data-step':step},c.svg);});}
var ul=document.getElementById('findings');
if(!D.findings.length)txt('li','none',ul,'empty');
D.findings.forEach(function(fd){var li=txt('li','',ul,'finding');
 var a=txt('a',fd.when,li);a.href='#step-'+fd.step;a.addEventListener('click',function(){mark(fd.step);});
 li.appendChild(document.createTextNode(' '));txt('code',fd.code,li);li.appendChild(document.createTextNode(' '));
 txt('span',fd.filename+':'+fd.line+(ranks.length>1&&fd.rank!=null?' (rank '+fd.rank+')':''),li,'where');li.appendChild(document.createTextNode(': '));rich(fd.message,li);});
var notes=document.getElementById('notes');
D.notes.forEach(function(n){var li=txt('li','',notes);if(n.type==='incident'){li.appendChild(document.createTextNode('incident at step '+n.step+': '));
  if(n.path){txt('code',n.path,li);li.appendChild(document.createTextNode(' (replay it: '));txt('code','amplint replay '+n.path,li);li.appendChild(document.createTextNode(')'));}
  else rich(n.message,li);}
 else{li.appendChild(document.createTextNode('first non-finite: '));rich(n.message,li);}});
if(!D.notes.length)txt('li','none',notes,'empty');
function fromHash(){var m=/^#step-(-?\\d+)$/.exec(location.hash);if(!m||!charts.length)return;var s=+m[1];mark(s);
 var r=charts[0].svg.getBoundingClientRect();show(s,r.left+X(Math.min(Math.max(s,x0),x1))/W*r.width,r.top+r.height/2);}
window.addEventListener('hashchange',fromHash);fromHash();
document.body.setAttribute('data-rendered','1');
})();
</script></body></html>
"""

#: (page key, step record field)
_SERIES = (("scale", "loss_scale"), ("scale_before", "loss_scale_before"), ("norm", "grad_norm"), ("time", "step_time_s"), ("mem", "peak_mem_bytes"))


def page_data(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """What the page draws: every rank's steps (columns), the numbers the summary states, why
    an empty series is empty, and every rank's findings and notes."""
    by_rank = steps_by_rank(events)
    ranks = sorted(by_rank) or [0]
    headers = [e for e in events if e.get("type") == "header"]
    header = next((e for e in headers if int(e.get("rank", 0) or 0) == ranks[0]), headers[0] if headers else {})
    columns = []
    for rank in sorted(by_rank):
        steps = by_rank[rank]
        column: Dict[str, Any] = {"rank": rank, "step": [int(s.get("step") or 0) for s in steps], "skipped": [1 if s.get("skipped") else 0 for s in steps]}
        for key, field in _SERIES:
            column[key] = [_number(s.get(field)) for s in steps]
        columns.append(column)
    findings = [e for e in events if e.get("type") == "finding"]
    findings.sort(key=lambda f: (int(f.get("step") or 0), bool(f.get("after"))))
    argv = header.get("argv") or []
    return {
        "program": " ".join(str(a) for a in argv[:6]) if argv else None,
        "header": {k: header.get(k) for k in ("torch", "cuda", "device", "capability", "autocast_dtype")},
        "numbers": [_numbers(by_rank[r], r) for r in sorted(by_rank)],
        "ranks": columns,
        "reasons": _reasons(by_rank, headers),
        "gaps": _gaps(by_rank),
        "findings": [
            {"code": f.get("code"), "filename": f.get("filename"), "line": f.get("line"), "message": f.get("message"),
             "step": int(f.get("step") or 0), "when": when(f), "rank": f.get("rank")}
            for f in findings
        ],
        "notes": [{k: n.get(k) for k in ("type", "message", "path", "step")} for n in events if n.get("type") in ("nonfinite", "incident")],
    }


def _numbers(steps: List[Dict[str, Any]], rank: int) -> Dict[str, Any]:
    """`findings.run_numbers`, with the scale written as the summary writes it (`%g`)."""
    n = dict(run_numbers(steps), rank=rank)
    if n["scale_from"] is not None:
        n["scale_text"] = f"{fmt_scale(n['scale_from'])} \u2192 {fmt_scale(n['scale_to'])}"
    return n


def _number(value: Any) -> Optional[float]:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _reasons(by_rank: Dict[int, List[Dict[str, Any]]], headers: List[Dict[str, Any]]) -> Dict[str, str]:
    """Why a series has no value at all, for the page to say in place of a chart."""
    steps = [s for rs in by_rank.values() for s in rs]
    if not steps:
        return {key: "no optimizer step was recorded (did the program import torch and step an optimizer?)" for key, _ in _SERIES}
    out: Dict[str, str] = {}
    if all(s.get("loss_scale") is None for s in steps):
        dtype = next((h.get("autocast_dtype") for h in headers if h.get("autocast_dtype")), None)
        out["scale"] = "no enabled GradScaler stepped the optimizer" + (
            " (bfloat16 autocast needs none)" if dtype == "bfloat16" else ": the run trained without loss scaling"
        )
    if all(s.get("grad_norm") is None for s in steps):
        if headers and all(h.get("grad_norm") is False for h in headers):
            out["norm"] = "not measured (--no-grad-norm)"
        elif all(s.get("skipped") for s in steps):
            out["norm"] = "every step was skipped: non-finite gradients have no norm"
        else:
            out["norm"] = "no gradient was finite when the guard read it"
    if all(s.get("step_time_s") is None for s in steps):
        out["time"] = "a step's time is measured from the step before it: the run had one step" if len(steps) == 1 else "not measured"
    if all(s.get("peak_mem_bytes") is None for s in steps):
        out["mem"] = "not readable on this platform (no CUDA device, no /proc or getrusage peak)"
    return out


def _gaps(by_rank: Dict[int, List[Dict[str, Any]]]) -> Dict[str, str]:
    """Why some steps of a series have no value (the page says how many)."""
    out = {"norm": "skipped steps have non-finite gradients, so no norm", "time": "the first step has no step before it"}
    steps = [s for rs in by_rank.values() for s in rs]
    if any(s.get("grad_norm") is None and not s.get("skipped") for s in steps):
        out["norm"] = "skipped steps, and steps whose gradients were not finite when read, have no norm"
    return out


def render(events: List[Dict[str, Any]]) -> str:
    data = json.dumps(page_data(events), allow_nan=False, default=str)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _PAGE.replace("__DATA__", data)


def write_report(directory: str, events: List[Dict[str, Any]]) -> str:
    path = os.path.join(directory, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(events))
    return path
