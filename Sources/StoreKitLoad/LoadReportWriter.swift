import Foundation
import Histogram

/// `sksim load --report DIR`: summary.json (what `--json` prints), timeseries.csv (one row per
/// interval per stage), histograms.hlog (HdrHistogram's log format, per interval and stage) and
/// report.html, one self-contained page (inline SVG drawn by inline JavaScript, no network).
public enum LoadReportWriter {
    public static func write(_ result: LoadCoordinator.Result, to directory: URL) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let summary = LoadSummaryJSON(result)
        try (summary.serialized(pretty: true) + "\n").write(to: directory.appendingPathComponent("summary.json"), atomically: true, encoding: .utf8)
        try timeseriesCSV(result.rows, startUnixNanoseconds: result.startUnixNanoseconds).write(to: directory.appendingPathComponent("timeseries.csv"), atomically: true, encoding: .utf8)
        let log = directory.appendingPathComponent("histograms.hlog")
        try? FileManager.default.removeItem(at: log)
        try FileManager.default.copyItem(at: result.histogramLog, to: log)
        try html(result, summary: summary).write(to: directory.appendingPathComponent("report.html"), atomically: true, encoding: .utf8)
    }

    public static let csvHeader = "second,stage,count,p50Microseconds,p90Microseconds,p99Microseconds,p999Microseconds,maxMicroseconds,started,completed,missedStarts,errors,inFlight,p95Microseconds,meanMicroseconds,time"

    /// One row per interval and stage reached in it; the interval's counters repeat on each of
    /// its rows, and an interval where no stage was reached has one row with stage `-`.
    /// The columns after `inFlight` came later and go last, so readers of the first ones keep working.
    /// `time` is the wall-clock instant the interval began (UTC, ISO 8601 with milliseconds), so the
    /// rows line up with other systems' metrics of the same minutes.
    public static func timeseriesCSV(_ rows: [LoadCoordinator.IntervalRow], startUnixNanoseconds: Int64) -> String {
        var lines = [csvHeader]
        let formatter = ISO8601DateFormatter()
        formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        formatter.timeZone = TimeZone(identifier: "UTC")
        for row in rows {
            let counters = "\(row.counters.started),\(row.counters.completed),\(row.counters.missedStarts),\(row.counters.errors),\(row.inFlight)"
            let second = String(format: "%.3f", row.startSeconds)
            let time = formatter.string(from: Date(timeIntervalSince1970: Double(startUnixNanoseconds) / 1e9 + row.startSeconds))
            // The built-in stages in their order, then a team's driver's own stages by name.
            let builtIn = LifecycleStage.allCases.compactMap { stage in row.stages[stage.rawValue].map { (stage.rawValue, $0) } }
            let stages = builtIn + row.stages.filter { LifecycleStage(rawValue: $0.key) == nil }.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
            if stages.isEmpty { lines.append("\(second),-,0,,,,,,\(counters),,,\(time)") }
            for (stage, summary) in stages {
                lines.append("\(second),\(stage),\(summary.count),\(summary.p50Microseconds),\(summary.p90Microseconds),\(summary.p99Microseconds),\(summary.p999Microseconds),\(summary.maxMicroseconds),\(counters),\(summary.p95Microseconds),\(summary.meanMicroseconds),\(time)")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    private struct ChartData: Encodable {
        struct Point: Encodable {
            var second: Double
            var started: Int
            var completed: Int
            var inFlight: Int
            var errors: Int
            var missedStarts: Int
            var p50: [String: UInt64]
            var p99: [String: UInt64]
        }
        var intervalSeconds: Double
        var points: [Point]
        /// Per stage: [percentile, microseconds] pairs of the whole run's histogram.
        var distribution: [String: [[Double]]]
        var stages: [String]
    }

    static func html(_ result: LoadCoordinator.Result, summary: LoadSummaryJSON) throws -> String {
        var distribution: [String: [[Double]]] = [:]
        var stages: [String] = []
        let histograms = LifecycleStage.allCases.compactMap { stage in result.figures.stages.histograms[stage].map { (stage.rawValue, $0) } }
            + result.figures.custom.stages.sorted { $0.key < $1.key }
        for (stage, histogram) in histograms where histogram.totalCount > 0 {
            stages.append(stage)
            var points: [[Double]] = []
            for step in histogram.percentiles(ticksPerHalfDistance: 5) {
                points.append([min(step.percentileLevelIteratedTo, 99.9999), Double(step.value)])
                if points.count >= 400 { break }
            }
            distribution[stage] = points
        }
        let data = ChartData(
            intervalSeconds: Double(result.plan.intervalNanoseconds) / 1e9,
            points: result.rows.map { row in
                ChartData.Point(second: row.startSeconds, started: row.counters.started, completed: row.counters.completed, inFlight: row.inFlight,
                                errors: row.counters.errors, missedStarts: row.counters.missedStarts,
                                p50: row.stages.mapValues(\.p50Microseconds), p99: row.stages.mapValues(\.p99Microseconds))
            },
            distribution: distribution, stages: stages)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        // `</` cannot end the script element early once escaped.
        let dataJSON = String(decoding: try encoder.encode(data), as: UTF8.self).replacingOccurrences(of: "</", with: "<\\/")
        let summaryJSON = summary.serialized().replacingOccurrences(of: "</", with: "<\\/")
        let title = "sksim load: \(summary.lifecycles) lifecycles, \(String(format: "%.1f", summary.lifecyclesPerSecond))/s"
        let passed = !result.thresholdsFailed
        let failedList = result.thresholds.filter { !$0.passed }.map(\.threshold.expression) + result.lostDrivers.map { "driver \($0.name) lost" }
        let banner = passed
            ? "<div id=\"verdict\" class=\"banner pass\" data-passed=\"true\">PASSED: \(result.thresholds.count) threshold\(result.thresholds.count == 1 ? "" : "s") held</div>"
            : "<div id=\"verdict\" class=\"banner fail\" data-passed=\"false\">FAILED: \(escape(failedList.joined(separator: ", ")))\(result.aborted.map { " (aborted: " + escape($0) + ")" } ?? "")</div>"
        var table = "<table id=\"stages\"><thead><tr><th>stage</th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th><th>max</th><th>errors</th></tr></thead><tbody>"
        for stage in stages {
            guard let figures = summary.stages[stage] else { continue }
            let cells = [String(figures.count), formatMicroseconds(UInt64(figures.meanMicroseconds)), formatMicroseconds(figures.p50Microseconds),
                         formatMicroseconds(figures.p90Microseconds), formatMicroseconds(figures.p95Microseconds),
                         formatMicroseconds(figures.p99Microseconds), formatMicroseconds(figures.maxMicroseconds), ""]
            table += "<tr data-stage=\"\(stage)\"><td>\(stage)</td>" + cells.map { "<td>\($0)</td>" }.joined() + "</tr>"
        }
        // Errors belong to lifecycles, not to the stage they reached: one row for them all.
        table += "<tr data-stage=\"lifecycles\"><td>all lifecycles</td><td>\(summary.lifecycles)</td><td colspan=\"6\">error rate \(String(format: "%.4f", summary.errorRate)), missed starts \(summary.missedStarts), incomplete \(summary.incomplete)</td><td>\(summary.errors)</td></tr>"
        table += "</tbody></table>"
        return htmlTemplate
            .replacingOccurrences(of: "@BANNER@", with: banner)
            .replacingOccurrences(of: "@TABLE@", with: table)
            .replacingOccurrences(of: "@TITLE@", with: escape(title))
            .replacingOccurrences(of: "@SUMMARY_TEXT@", with: escape(summaryText(result)))
            .replacingOccurrences(of: "@DATA@", with: dataJSON)
            .replacingOccurrences(of: "@SUMMARY@", with: summaryJSON)
    }

    static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
    }

    /// The page: a pass/fail banner, the per-stage table, and four charts drawn into inline SVG by the
    /// script at its end. Once all four are drawn, `<body data-charts-rendered="4">` says so (what the
    /// browser test checks).
    static let htmlTemplate = """
    <!DOCTYPE html>
    <html lang="en"><head><meta charset="utf-8"><title>@TITLE@</title>
    <style>
    body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
    h1{font-size:20px}h2{font-size:16px;margin-top:28px}
    pre{background:#f6f6f6;padding:12px;overflow:auto;font-size:12px}
    svg{background:#fff;border:1px solid #ddd}
    .axis{stroke:#999;stroke-width:1}.grid{stroke:#eee}.label{font-size:11px;fill:#555}
    .series{fill:none;stroke-width:1.8}.legend{font-size:12px}.dot{fill-opacity:0;stroke:none}.dot:hover{fill-opacity:1}
    .banner{font-size:18px;font-weight:600;padding:12px 16px;border-radius:4px;color:#fff}.pass{background:#2e7d32}.fail{background:#c62828}
    table{border-collapse:collapse;margin-top:8px}th,td{padding:4px 10px;border-bottom:1px solid #ddd;text-align:right}th:first-child,td:first-child{text-align:left}
    </style></head>
    <body data-charts-rendered="0">
    <h1>@TITLE@</h1>
    @BANNER@
    <h2>Stages (latency from each lifecycle's intended start)</h2>
    @TABLE@
    <h2>Throughput (lifecycles per second)</h2><svg id="throughput" width="960" height="300"></svg>
    <h2>Errors, missed starts and lifecycles in flight</h2><svg id="errors" width="960" height="300"></svg>
    <h2>Latency over time (p99 per stage)</h2><svg id="percentiles" width="960" height="340"></svg>
    <h2>Latency distribution (whole run)</h2><svg id="distribution" width="960" height="340"></svg>
    <h2>Summary</h2><pre>@SUMMARY_TEXT@</pre>
    <script id="data" type="application/json">@DATA@</script>
    <script id="summary" type="application/json">@SUMMARY@</script>
    <script>
    (function(){
    var data=JSON.parse(document.getElementById('data').textContent);
    var colors=['#1f77b4','#ff7f0e','#2ca02c','#d62728','#9467bd','#8c564b','#e377c2','#7f7f7f','#17becf','#bcbd22','#393b79'];
    var NS='http://www.w3.org/2000/svg';
    function el(svg,name,attributes,text){var node=document.createElementNS(NS,name);for(var key in attributes)node.setAttribute(key,attributes[key]);if(text!==undefined)node.textContent=text;svg.appendChild(node);return node;}
    function ms(us){return us>=1e6?(us/1e6).toFixed(2)+'s':us>=1000?(us/1000).toFixed(us>=1e4?1:2)+'ms':Math.round(us)+'µs';}
    function chart(id,series,options){
      var svg=document.getElementById(id),W=+svg.getAttribute('width'),L=70,R=20,T=14,B=36;
      // The legend goes below the plot, as many rows as it needs, so it is never clipped.
      var named=series.filter(function(s){return s.legend&&s.points.length;}),perRow=Math.max(1,Math.floor((W-L)/150)),legendRows=Math.ceil(named.length/perRow);
      var H=+svg.getAttribute('height')+legendRows*18;svg.setAttribute('height',H);var plotBottom=H-legendRows*18;
      var xs=[],ys=[];series.forEach(function(s){s.points.forEach(function(p){xs.push(p[0]);ys.push(p[1]);});});
      if(!xs.length){el(svg,'text',{x:W/2,y:H/2,'class':'label','text-anchor':'middle'},'no data');return 0;}
      var x0=Math.min.apply(null,xs),x1=Math.max.apply(null,xs),y1=Math.max.apply(null,ys)*1.08||1;if(x1===x0)x1=x0+1;
      var fx=options.xLog?function(v){return L+(Math.log10(v)-Math.log10(x0))/(Math.log10(x1)-Math.log10(x0))*(W-L-R);}:function(v){return L+(v-x0)/(x1-x0)*(W-L-R);};
      var fy=function(v){return plotBottom-B-(v/y1)*(plotBottom-T-B);};
      for(var i=0;i<=4;i++){var v=y1*i/4;el(svg,'line',{x1:L,x2:W-R,y1:fy(v),y2:fy(v),'class':'grid'});el(svg,'text',{x:L-6,y:fy(v)+4,'class':'label','text-anchor':'end'},options.yFormat(v));}
      var ticks=options.xTicks(x0,x1);ticks.forEach(function(t){el(svg,'text',{x:fx(t[0]),y:plotBottom-B+16,'class':'label','text-anchor':'middle'},t[1]);});
      el(svg,'line',{x1:L,x2:W-R,y1:plotBottom-B,y2:plotBottom-B,'class':'axis'});el(svg,'line',{x1:L,x2:L,y1:T,y2:plotBottom-B,'class':'axis'});
      el(svg,'text',{x:(L+W-R)/2,y:plotBottom-4,'class':'label','text-anchor':'middle'},options.xLabel);
      var drawn=0,legendIndex=0;
      series.forEach(function(s){
        if(!s.points.length)return;
        var d=s.points.map(function(p,i){return (i?'L':'M')+fx(p[0]).toFixed(1)+','+fy(p[1]).toFixed(1);}).join('');
        var path=el(svg,'path',{d:d,'class':'series',stroke:s.color,'stroke-dasharray':s.dashed?'5,4':'none','data-points':s.points.length});drawn++;
        if(s.legend)el(path,'title',{},s.legend);
        // A tooltip on every point: the series, where it is, and its value.
        if(s.points.length<=600)s.points.forEach(function(p){var dot=el(svg,'circle',{cx:fx(p[0]).toFixed(1),cy:fy(p[1]).toFixed(1),r:4,'class':'dot',fill:s.color});
          el(dot,'title',{},(s.legend||'')+': '+options.xFormat(p[0])+' → '+options.yFormat(p[1]));});
        if(s.legend){var column=legendIndex%perRow,row=Math.floor(legendIndex/perRow),lx=L+column*150,ly=plotBottom+row*18+4;legendIndex++;
          el(svg,'line',{x1:lx,x2:lx+20,y1:ly+6,y2:ly+6,stroke:s.color,'stroke-width':2,'stroke-dasharray':s.dashed?'5,4':'none'});el(svg,'text',{x:lx+26,y:ly+10,'class':'legend'},s.legend);}
      });
      svg.setAttribute('data-series',drawn);return drawn;
    }
    function timeTicks(x0,x1){var out=[],step=Math.max(1,Math.ceil((x1-x0)/10));for(var t=Math.ceil(x0);t<=x1;t+=step)out.push([t,t+'s']);return out;}
    var rendered=0,dt=data.intervalSeconds;
    var through=[{points:data.points.map(function(p){return [p.second+dt,p.started/dt];}),color:colors[0],legend:'started/s'},
                 {points:data.points.map(function(p){return [p.second+dt,p.completed/dt];}),color:colors[2],legend:'completed/s'}];
    function seconds(v){return (+v).toFixed(1)+'s';}
    function count(v){return String(Math.round(v));}
    if(chart('throughput',through,{xLabel:'seconds since the start',xTicks:timeTicks,xFormat:seconds,yFormat:count}))rendered++;
    var trouble=[{points:data.points.map(function(p){return [p.second+dt,p.errors];}),color:colors[3],legend:'errors'},
                 {points:data.points.map(function(p){return [p.second+dt,p.missedStarts];}),color:colors[1],legend:'missed starts'},
                 {points:data.points.map(function(p){return [p.second+dt,p.inFlight];}),color:colors[0],legend:'in flight'}];
    if(chart('errors',trouble,{xLabel:'seconds since the start',xTicks:timeTicks,xFormat:seconds,yFormat:count}))rendered++;
    // One series per stage (its p99): a p50 beside each would double the legend; the table has every percentile.
    var latency=data.stages.map(function(stage,i){
      return {points:data.points.filter(function(p){return p.p99[stage]!==undefined;}).map(function(p){return [p.second+dt,p.p99[stage]];}),color:colors[i%colors.length],legend:stage+' p99'};
    });
    if(chart('percentiles',latency,{xLabel:'seconds since the start',xTicks:timeTicks,xFormat:seconds,yFormat:ms}))rendered++;
    var spread=data.stages.map(function(stage,i){return {points:data.distribution[stage].map(function(p){return [1/(1-p[0]/100),p[1]];}),color:colors[i%colors.length],legend:stage};});
    function percentile(v){return (100-100/v).toFixed(3)+'%';}
    if(chart('distribution',spread,{xLog:true,xLabel:'percentile',xFormat:percentile,yFormat:ms,xTicks:function(){return [[1,'0%'],[10,'90%'],[100,'99%'],[1000,'99.9%'],[10000,'99.99%'],[100000,'99.999%']];}}))rendered++;
    document.body.setAttribute('data-charts-rendered',rendered);
    })();
    </script>
    </body></html>

    """
}
