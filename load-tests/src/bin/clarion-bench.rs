//! `clarion-bench`: Clarion's benchmarks (see `--help`).

use clap::{Parser, Subcommand};
use clarion_load_tests::bench::api_check::{ApiCheckArgs, run as api_check};
use clarion_load_tests::bench::chaos::{ChaosArgs, run as chaos};
use clarion_load_tests::bench::dispatcher_cost::{DispatcherCostArgs, run as dispatcher_cost};
use clarion_load_tests::bench::harvest::{HarvestArgs, run as harvest};
use clarion_load_tests::bench::mocks::{MocksArgs, run as mocks};
use clarion_load_tests::bench::overtake::{OvertakeArgs, run as overtake};
use clarion_load_tests::bench::pacing::{PacingArgs, run as pacing};
use clarion_load_tests::bench::run::{RunArgs, run as run_90in2};
use clarion_load_tests::bench::scaling::{ScalingArgs, run as scaling};
use clarion_load_tests::bench::storm::{StormArgs, run as storm};
use clarion_load_tests::bench::webpush::{WebPushArgs, run as webpush};
use clarion_load_tests::bench::write_load::{WriteLoadArgs, run as write_load};
use clarion_load_tests::seed::{SeedArgs, run as seed};

#[derive(Parser)]
#[command(
    name = "clarion-bench",
    about = "Clarion benchmarks against real processes on this machine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// A coordinator process on a database and AMQP namespace of its own,
    /// and a command run against it (`CLARION_API_BASE`, `CLARION_API_KEY`
    /// in its environment); ./scripts/test runs schemathesis this way.
    ApiCheck(ApiCheckArgs),
    /// The chaos suite: faults injected mid-send into a cluster of release
    /// processes (kills, SIGTERM, broker and database restarts, provider
    /// storms, a hung OAuth2 endpoint, a black hole, cancel with workers
    /// down); writes chaos.json and prints a table.
    Chaos(ChaosArgs),
    /// Instructions per push of one dispatcher per platform, counted by
    /// valgrind --tool=callgrind over one send to --devices devices (half
    /// iPhones); writes dispatcher-cost.json.
    DispatcherCost(DispatcherCostArgs),
    /// Harvest rate and harvester memory for one large topic.
    Harvest(HarvestArgs),
    /// Requests per second the mock APNs and FCM serve, driven by h2load.
    Mocks(MocksArgs),
    /// Does a send wait behind another? A small send into a big one, an
    /// urgent send into a bulk one, two equal sends, each with the job
    /// relay's scheduling off and on; writes overtake.json.
    Overtake(OvertakeArgs),
    /// Several Android dispatchers sharing one FCM project's quota, which
    /// the mock enforces; one replica killed mid-send; writes
    /// pacing.json and pacing.svg.
    Pacing(PacingArgs),
    /// Bulk-loads a synthetic audience with COPY.
    Seed(SeedArgs),
    /// The 90in2 benchmark: seed, cluster, send, ceiling, report and plot.
    Run(RunArgs),
    /// Summarises one commit's 90in2 results by audience size (medians of
    /// repeated runs): scaling.json, scaling.svg (t90 and CPU per push
    /// against the audience) and the README's table on standard output.
    Scaling(ScalingArgs),
    /// The storm after an alert: registration writes and reads, receipts
    /// (batched and one a request), status pollers and `/healthz`, each
    /// alone and all together during a send, with the send's t90 without
    /// and with them; writes storm.json, storm.svg and prints the table.
    Storm(StormArgs),
    /// The web dispatcher alone (batches queued in RabbitMQ) against the
    /// npm web-push library at several concurrencies, both on the same
    /// mock web push service, and its CPU per push against the encryption
    /// alone; writes webpush.json.
    Webpush(WebPushArgs),
    /// A bounded load of registration PUTs or receipts against a running
    /// coordinator from concurrent clients: rate and latency percentiles.
    WriteLoad(WriteLoadArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Warnings only: the mocks' libraries' debug and trace spans stay off.
    let _ = clarion_runtime::telemetry::init_logging(&clarion_runtime::LogSettings {
        format: clarion_runtime::settings::LogFormat::Text,
        filter: "warn".into(),
    });
    match Cli::parse().command {
        Command::ApiCheck(args) => api_check(args).await,
        Command::Chaos(args) => {
            let report = chaos(args).await?;
            if report.failed > 0 {
                anyhow::bail!("{} scenario(s) did not meet their bounds", report.failed);
            }
            Ok(())
        }
        Command::DispatcherCost(args) => dispatcher_cost(args).await.map(|_| ()),
        Command::Harvest(args) => harvest(args).await.map(|_| ()),
        Command::Mocks(args) => mocks(args).await.map(|_| ()),
        Command::Scaling(args) => scaling(args).map(|_| ()),
        Command::Overtake(args) => {
            let report = overtake(args).await?;
            if !report.targets.met {
                anyhow::bail!("the overtake targets were not met");
            }
            Ok(())
        }
        Command::Pacing(args) => {
            let report = pacing(args).await?;
            if report.lost > 0 {
                anyhow::bail!("{} devices got no push", report.lost);
            }
            Ok(())
        }
        Command::Seed(args) => seed(args).await,
        Command::Run(args) => run_90in2(args).await.map(|_| ()),
        Command::Storm(args) => storm(args).await.map(|_| ()),
        Command::Webpush(args) => webpush(args).await.map(|_| ()),
        Command::WriteLoad(args) => write_load(args).await,
    }
}
