defmodule KinoTraceBench.Report do
  @moduledoc false

  def machine do
    model =
      case System.cmd("lscpu", [], stderr_to_stdout: true) do
        {out, 0} ->
          out
          |> String.split("\n")
          |> Enum.find_value("?", fn line ->
            case String.split(line, ":", parts: 2) do
              ["Model name", v] -> String.trim(v)
              _ -> nil
            end
          end)

        _ ->
          "?"
      end

    otp = :erlang.system_info(:otp_release)

    otp_version =
      case File.read(Path.join([:code.root_dir(), "releases", otp, "OTP_VERSION"])) do
        {:ok, v} -> String.trim(v)
        _ -> otp
      end

    mem_gb = total_ram_gb()

    "machine: #{System.schedulers_online()} schedulers online, nproc #{:erlang.system_info(:logical_processors_available)}, " <>
      "CPU #{model}, RAM #{mem_gb} GB, OTP #{otp_version} (erts #{:erlang.system_info(:version)}), Elixir #{System.version()}"
  end

  defp total_ram_gb do
    case File.read("/proc/meminfo") do
      {:ok, text} ->
        [_, kb] = Regex.run(~r/MemTotal:\s+(\d+)/, text)
        round(String.to_integer(kb) / 1024 / 1024)

      _ ->
        "?"
    end
  end

  def mb(bytes), do: :erlang.float_to_binary(bytes / 1_048_576, decimals: 1) <> " MB"
end
