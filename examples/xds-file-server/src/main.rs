//! `xds-file-server`: the control plane binary. Everything but the logging set-up is in the
//! library ([`xds_file_server::run`]), so the tests can reach its pieces.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::Parser;
use xds_file_server::cli::{Args, Command, LogFormat};
use xds_file_server::status_cli::{self, AdminClient, Credentials, StatusRequest};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = Args::parse();
    let command = args.command.take();
    if let Some(Command::Check { config, max_config_bytes }) = &command {
        let (config, max_config_bytes) = (config.clone(), *max_config_bytes);
        let mut out = std::io::stdout().lock();
        return match xds_file_server::check::check(&config, max_config_bytes, &mut out) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xds-file-server check: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::Publish { etcd, prefix, config, max_config_bytes }) = command {
        return match xds_file_server::etcd::publish(&etcd, &prefix, &config, max_config_bytes).await
        {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("xds-file-server publish: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(Command::Status { .. }) = &command {
        return status(command).await;
    }
    let filter = match tracing_subscriber::EnvFilter::try_new(&args.log) {
        Ok(filter) => filter,
        Err(e) => {
            eprintln!("xds-file-server: --log {:?}: {e}", args.log);
            return ExitCode::from(2);
        }
    };
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match args.log_format {
        // Colour codes only where a person reads them: not in files, pipes or journald.
        LogFormat::Text => logs.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
    match xds_file_server::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        // Display, not Debug: the reason as a sentence, not a quoted string.
        Err(e) => {
            eprintln!("xds-file-server: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `xds-file-server status`: reads a running server's admin port (see `status_cli`).
async fn status(command: Option<Command>) -> ExitCode {
    let Some(Command::Status {
        admin,
        admin_token_file,
        admin_ca,
        admin_cert,
        admin_key,
        node,
        group,
        state,
        type_label,
        output,
    }) = command
    else {
        return ExitCode::FAILURE;
    };
    let filters = [("group", group), ("state", state), ("type", type_label)]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect();
    let request = StatusRequest { node: node.as_deref(), filters, output };
    let credentials = Credentials {
        token_file: admin_token_file.as_deref(),
        ca: admin_ca.as_deref(),
        identity: admin_cert.as_deref().zip(admin_key.as_deref()),
    };
    let result = match AdminClient::new(&admin, credentials) {
        Ok(client) => status_cli::status(&client, &request, &mut std::io::stdout().lock()).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xds-file-server status: {e}");
            ExitCode::FAILURE
        }
    }
}
