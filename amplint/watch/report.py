"""DIR/report.html: one self-contained file (inline SVG drawn by inline JS, no network).

Charts for the loss scale (log axis, skipped steps marked), the unscaled
gradient norm and the step time, and the findings, each linked to its step
(clicking one marks that step on every chart). Everything from the watched
program (file names, module names, messages) reaches the page only as JSON
data inserted with `textContent`, never as markup; the JSON is escaped so it
cannot close its <script> element.
"""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>amplint run report</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.meta{color:#555}.chart{border:1px solid #ddd;margin:6px 0}
.series{fill:none;stroke:#2563eb;stroke-width:1.5}.axis{stroke:#999}.lbl{font-size:11px;fill:#555}
.skipped{fill:#dc2626}.marker{stroke:#f59e0b;stroke-width:2}
li.finding{margin:4px 0}code{background:#f3f4f6;padding:0 3px}
.empty{color:#777;font-style:italic}
</style></head><body>
<h1>amplint run report</h1>
<p class="meta" id="meta"></p>
<h2>Loss scale <span class="meta">(log scale; red: skipped steps)</span></h2><div id="scale"></div>
<h2>Unscaled gradient norm</h2><div id="norm"></div>
<h2>Step time (s)</h2><div id="time"></div>
<h2>Findings</h2><ul id="findings"></ul>
<h2>Non-finite sources and incidents</h2><ul id="notes"></ul>
<script type="application/json" id="data">__DATA__</script>
<script>
(function(){
var D=JSON.parse(document.getElementById('data').textContent);
var NS='http://www.w3.org/2000/svg',W=1000,H=220,L=60,R=10,T=10,B=30;
function el(n,a,p){var e=document.createElementNS(NS,n);for(var k in a)e.setAttribute(k,a[k]);if(p)p.appendChild(e);return e;}
function txt(tag,s,p){var e=document.createElement(tag);e.textContent=s;p.appendChild(e);return e;}
var h=D.header||{};
document.getElementById('meta').textContent='torch '+(h.torch||'?')+', CUDA '+(h.cuda||'none')+', device '+(h.device||'?')+
 (h.capability?' (capability '+h.capability+')':'')+', autocast '+(h.autocast_dtype||'none')+'; '+D.steps.length+' optimizer steps, '+
 D.steps.filter(function(s){return s.skipped;}).length+' skipped';
var charts=[];
function chart(id,key,log){
 var box=document.getElementById(id),pts=D.steps.filter(function(s){return typeof s[key]==='number'&&(!log||s[key]>0);});
 if(!pts.length){txt('p','no data',box).className='empty';return;}
 var svg=el('svg',{width:W,height:H,viewBox:'0 0 '+W+' '+H,'class':'chart','data-key':key},box);
 var f=log?function(v){return Math.log(v)/Math.LN2;}:function(v){return v;};
 var x0=D.steps[0].step,x1=Math.max(D.steps[D.steps.length-1].step,x0+1);
 var ys=pts.map(function(s){return f(s[key]);}),y0=Math.min.apply(null,ys),y1=Math.max.apply(null,ys);if(y1===y0){y1=y0+1;}
 function X(v){return L+(v-x0)/(x1-x0)*(W-L-R);} function Y(v){return H-B-(f(v)-y0)/(y1-y0)*(H-T-B);}
 el('line',{x1:L,y1:H-B,x2:W-R,y2:H-B,'class':'axis'},svg);el('line',{x1:L,y1:T,x2:L,y2:H-B,'class':'axis'},svg);
 var lo=log?Math.pow(2,y0):y0,hi=log?Math.pow(2,y1):y1;
 el('text',{x:2,y:H-B,'class':'lbl'},svg).textContent=lo.toPrecision(3);
 el('text',{x:2,y:T+10,'class':'lbl'},svg).textContent=hi.toPrecision(3);
 el('text',{x:L,y:H-8,'class':'lbl'},svg).textContent='step '+x0;
 el('text',{x:W-R-60,y:H-8,'class':'lbl'},svg).textContent='step '+x1;
 el('path',{d:pts.map(function(s,i){return (i?'L':'M')+X(s.step).toFixed(1)+' '+Y(s[key]).toFixed(1);}).join(''),'class':'series'},svg);
 if(key==='loss_scale'){D.steps.forEach(function(s){if(s.skipped&&typeof s.loss_scale==='number'){
  var c=el('circle',{cx:X(s.step).toFixed(1),cy:Y(s.loss_scale).toFixed(1),r:3,'class':'skipped','data-step':s.step},svg);
  el('title',{},c).textContent='step '+s.step+' skipped';}});}
 charts.push({svg:svg,X:X});
}
chart('scale','loss_scale',true);chart('norm','grad_norm',false);chart('time','step_time_s',false);
function mark(step){charts.forEach(function(c){var old=c.svg.querySelector('.marker');if(old)old.remove();
 el('line',{x1:c.X(step),y1:T,x2:c.X(step),y2:H-B,'class':'marker','data-step':step},c.svg);});}
var ul=document.getElementById('findings');
if(!D.findings.length){txt('li','none',ul).className='empty';}
D.findings.forEach(function(f){var li=txt('li','',ul);li.className='finding';
 var a=txt('a','step '+f.step,li);a.href='#step-'+f.step;a.addEventListener('click',function(e){e.preventDefault();mark(f.step);});
 li.appendChild(document.createTextNode(' '));txt('code',f.code,li);
 li.appendChild(document.createTextNode(' '+f.filename+':'+f.line+': '+f.message));});
var notes=document.getElementById('notes');
D.notes.forEach(function(n){txt('li',(n.type==='incident'?'incident: ':'first non-finite: ')+(n.type==='incident'?(n.path||'')+' '+(n.message||''):n.message),notes);});
if(!D.notes.length){txt('li','none',notes).className='empty';}
document.body.setAttribute('data-rendered','1');
})();
</script></body></html>
"""


def page_data(events: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The first rank's header and steps, every rank's findings and notes."""
    ranks = sorted({int(e.get("rank", 0) or 0) for e in events if e.get("type") == "step"}) or [0]
    rank = ranks[0]
    header = next((e for e in events if e.get("type") == "header" and int(e.get("rank", 0) or 0) == rank), {})
    steps = [e for e in events if e.get("type") == "step" and int(e.get("rank", 0) or 0) == rank]
    keep = ("step", "loss_scale", "skipped", "grad_norm", "step_time_s")
    return {
        "header": {k: header.get(k) for k in ("torch", "cuda", "device", "capability", "autocast_dtype")},
        "steps": [{k: s.get(k) for k in keep} for s in steps],
        "findings": [{k: f.get(k) for k in ("code", "filename", "line", "message", "step")} for f in events if f.get("type") == "finding"],
        "notes": [{k: n.get(k) for k in ("type", "message", "path", "step")} for n in events if n.get("type") in ("nonfinite", "incident")],
    }


def render(events: List[Dict[str, Any]]) -> str:
    data = json.dumps(page_data(events), allow_nan=False, default=str)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _PAGE.replace("__DATA__", data)


def write_report(directory: str, events: List[Dict[str, Any]]) -> str:
    path = os.path.join(directory, "report.html")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(render(events))
    return path
