@echo off
rem Starts WanTrainer. First run: creates .venv and installs. Until the GUI ships this runs the
rem command-line trainer with the given arguments, e.g. start-ui.bat --config-path my.json
cd /d "%~dp0"
if not exist .venv\Scripts\python.exe (
    python -m venv .venv || goto :error
    .venv\Scripts\python.exe -m pip install --upgrade pip || goto :error
    .venv\Scripts\python.exe -c "import torch" 2>nul || .venv\Scripts\python.exe -m pip install torch==2.13.0 || goto :error
    .venv\Scripts\python.exe -m pip install -r requirements.txt || goto :error
)
if exist scripts\train_ui.py (
    .venv\Scripts\python.exe scripts\train_ui.py %*
) else (
    .venv\Scripts\python.exe scripts\train.py %*
)
exit /b %errorlevel%
:error
echo Installation failed; see the messages above.
exit /b 1
