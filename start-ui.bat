@echo off
rem Starts the WanTrainer GUI. The first run creates .venv and installs; later runs start at once.
rem Arguments go to scripts\train_ui.py, e.g. start-ui.bat --config-path my.json
cd /d "%~dp0"
if not exist .venv\Scripts\python.exe (
    python -m venv .venv || goto :error
    .venv\Scripts\python.exe -m pip install --upgrade pip || goto :error
    .venv\Scripts\python.exe -c "import torch" 2>nul || call :install_torch || goto :error
    .venv\Scripts\python.exe -m pip install -r requirements.txt || goto :error
)
.venv\Scripts\python.exe scripts\train_ui.py %*
exit /b %errorlevel%
:error
echo Installation failed; see the messages above.
exit /b 1

:install_torch
rem PyPI's torch is CPU-only on Windows: with an NVIDIA GPU take the CUDA build. TORCH_SPEC overrides.
if defined TORCH_SPEC (
    echo torch: TORCH_SPEC is set, installing: %TORCH_SPEC%
    .venv\Scripts\python.exe -m pip install %TORCH_SPEC%
    exit /b %errorlevel%
)
where nvidia-smi >nul 2>nul && nvidia-smi -L >nul 2>nul && (
    echo torch: NVIDIA GPU found, installing the CUDA 12.8 build
    .venv\Scripts\python.exe -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128
    exit /b %errorlevel%
)
echo torch: no NVIDIA GPU found, installing the CPU build (training runs on the CPU)
.venv\Scripts\python.exe -m pip install torch==2.13.0
exit /b %errorlevel%
